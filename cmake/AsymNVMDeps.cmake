# Finds every third-party dependency (Debian packages; scripts/setup.sh installs them) and defines
# imported targets named asymnvm::dep::<name>.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
pkg_check_modules(PMEM REQUIRED IMPORTED_TARGET libpmem)
pkg_check_modules(IBVERBS REQUIRED IMPORTED_TARGET libibverbs)
# sd_notify for systemd units with Type=notify (common/service.h).
pkg_check_modules(SYSTEMD REQUIRED IMPORTED_TARGET libsystemd)
find_package(OpenSSL REQUIRED COMPONENTS Crypto SSL)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 QUIET CONFIG)
if(NOT CLI11_FOUND)
  find_path(CLI11_INCLUDE CLI/CLI.hpp REQUIRED)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  target_include_directories(CLI11::CLI11 INTERFACE ${CLI11_INCLUDE})
endif()

find_path(ISAL_INCLUDE isa-l/crc.h REQUIRED)
find_library(ISAL_LIB isal REQUIRED)
add_library(asymnvm_dep_isal INTERFACE IMPORTED)
target_include_directories(asymnvm_dep_isal INTERFACE ${ISAL_INCLUDE})
target_link_libraries(asymnvm_dep_isal INTERFACE ${ISAL_LIB})

find_path(XXHASH_INCLUDE xxhash.h REQUIRED)
find_library(XXHASH_LIB xxhash REQUIRED)
add_library(asymnvm_dep_xxhash INTERFACE IMPORTED)
target_include_directories(asymnvm_dep_xxhash INTERFACE ${XXHASH_INCLUDE})
target_link_libraries(asymnvm_dep_xxhash INTERFACE ${XXHASH_LIB})

if(ASYMNVM_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()

# Prometheus metrics (doc/operations.md): the exposer (pull) and core of Debian's prometheus-cpp-dev.
find_package(prometheus-cpp CONFIG REQUIRED)
