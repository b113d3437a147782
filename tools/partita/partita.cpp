//===- partita.cpp - the user's driver ------------------------------------===//

#include <cstdio>

int main(int argc, char **argv) {
  std::fprintf(stderr, "partita: no subcommands yet\n");
  return 1;
}
