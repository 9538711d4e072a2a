# Sourced by the scripts that configure and build a tree (run.sh, test.sh).
#
# ccache when installed (setup.sh installs it): paths are hashed relative to the repository and
# without the build directory, so clones and worktrees of the same sources share objects.
if command -v ccache >/dev/null; then
  export CMAKE_C_COMPILER_LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER:-ccache}
  export CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(pwd)} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
fi

# asymnvm_configure DIR [cmake arguments...]: configure DIR from the repository root with Ninja
# when installed (it schedules two cores better than make: a cold build took 17.7 min against
# 21). A tree configured earlier keeps the generator it was made with (cmake refuses a change).
asymnvm_configure() {
  local dir=$1
  shift
  local gen=()
  if [ ! -f "$dir/CMakeCache.txt" ] && command -v ninja >/dev/null; then
    gen=(-G Ninja)
  fi
  cmake "${gen[@]}" -S . -B "$dir" "$@" >/dev/null
}
