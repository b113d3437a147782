# Partita's version, read by the whole build and by the runtime-only project
# (runtime/CMakeLists.txt), so both give the same library versions.
# libpartita_runtime.so and libpartita_plan.so take major.minor as their
# SOVERSION: before 1.0, every minor release may change the ABI.
set(PARTITA_VERSION 0.1.0)
string(REGEX MATCH "^[0-9]+\\.[0-9]+" PARTITA_SOVERSION "${PARTITA_VERSION}")
