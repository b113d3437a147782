//===- VJPInterface.cpp - vector-Jacobian products of nn ops --------------===//

#include "dialects/nn/Interfaces/VJPInterface.h"

#include "dialects/nn/Interfaces/VJPInterface.cpp.inc"
