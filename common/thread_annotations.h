// Clang thread-safety annotations and the annotated mutex the project locks with.
//
// Clang's -Wthread-safety (on in every clang build, an error with ASYMNVM_WERROR=ON) checks at
// compile time that a field marked ASYMNVM_GUARDED_BY(mu) is only touched with mu held, that a
// function marked ASYMNVM_REQUIRES(mu) is only called with mu held, and that every lock is
// released on every path. The macros expand to nothing on other compilers (GCC builds are
// unchecked but identical). Reference: https://clang.llvm.org/docs/ThreadSafetyAnalysis.html
//
// libstdc++'s std::mutex and std::lock_guard carry no annotations, so a lock taken through them
// is invisible to the analysis: state shared between threads is guarded by asymnvm::Mutex and
// locked with asymnvm::MutexLock (a scoped guard that can also be released and re-taken, the
// std::unique_lock uses), or asymnvm::SharedMutex with ReaderMutexLock / WriterMutexLock.
//
// Condition variables stay std::condition_variable (no wrapper, no condition_variable_any
// overhead): MutexLock owns a std::unique_lock<std::mutex> and native() hands it to the wait,
//   MutexLock lock(mu_);
//   cv_.wait(lock.native(), [&]() ASYMNVM_REQUIRES(mu_) { return ready_; });
// The predicate runs with the mutex held but the analysis checks a lambda as a function of its
// own, so a predicate that reads guarded fields says ASYMNVM_REQUIRES(mu_) (the wait calls it
// from the library, which the analysis does not check). native() is the documented escape: the
// wait releases and re-takes the mutex behind the analysis' back, which is sound because it
// returns with the mutex held; do not unlock through native() otherwise.
#pragma once

#include <mutex>
#include <shared_mutex>

#if defined(__clang__)
#define ASYMNVM_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define ASYMNVM_THREAD_ANNOTATION(x)
#endif

// A class that is a lock (ASYMNVM_CAPABILITY("mutex")) or a scoped guard of one.
#define ASYMNVM_CAPABILITY(x) ASYMNVM_THREAD_ANNOTATION(capability(x))
#define ASYMNVM_SCOPED_CAPABILITY ASYMNVM_THREAD_ANNOTATION(scoped_lockable)
// Data: the field is read and written only with the mutex held (PT_: the pointee, not the pointer).
#define ASYMNVM_GUARDED_BY(x) ASYMNVM_THREAD_ANNOTATION(guarded_by(x))
#define ASYMNVM_PT_GUARDED_BY(x) ASYMNVM_THREAD_ANNOTATION(pt_guarded_by(x))
// Lock order: this mutex is taken after / before the others.
#define ASYMNVM_ACQUIRED_AFTER(...) ASYMNVM_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define ASYMNVM_ACQUIRED_BEFORE(...) ASYMNVM_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
// Functions: the caller holds (REQUIRES) / must not hold (EXCLUDES) the mutex.
#define ASYMNVM_REQUIRES(...) ASYMNVM_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define ASYMNVM_REQUIRES_SHARED(...) \
  ASYMNVM_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#define ASYMNVM_EXCLUDES(...) ASYMNVM_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
// Functions that take or drop a lock and return with it held / released.
#define ASYMNVM_ACQUIRE(...) ASYMNVM_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ASYMNVM_ACQUIRE_SHARED(...) \
  ASYMNVM_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define ASYMNVM_RELEASE(...) ASYMNVM_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define ASYMNVM_RELEASE_SHARED(...) \
  ASYMNVM_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define ASYMNVM_RELEASE_GENERIC(...) \
  ASYMNVM_THREAD_ANNOTATION(release_generic_capability(__VA_ARGS__))
#define ASYMNVM_TRY_ACQUIRE(...) ASYMNVM_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define ASYMNVM_TRY_ACQUIRE_SHARED(...) \
  ASYMNVM_THREAD_ANNOTATION(try_acquire_shared_capability(__VA_ARGS__))
// A run-time check that the lock is held: the analysis assumes it afterwards.
#define ASYMNVM_ASSERT_CAPABILITY(x) ASYMNVM_THREAD_ANNOTATION(assert_capability(x))
#define ASYMNVM_ASSERT_SHARED_CAPABILITY(x) ASYMNVM_THREAD_ANNOTATION(assert_shared_capability(x))
// The function returns a reference to this lock (an accessor of a private mutex).
#define ASYMNVM_RETURN_CAPABILITY(x) ASYMNVM_THREAD_ANNOTATION(lock_returned(x))
// The one function the analysis cannot follow; say why next to every use.
#define ASYMNVM_NO_THREAD_SAFETY_ANALYSIS ASYMNVM_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace asymnvm {

// std::mutex as a capability. BasicLockable/Lockable, so std::scoped_lock and
// std::condition_variable_any also accept it (though neither is annotated: prefer MutexLock).
class ASYMNVM_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ASYMNVM_ACQUIRE() { mu_.lock(); }
  void unlock() ASYMNVM_RELEASE() { mu_.unlock(); }
  bool try_lock() ASYMNVM_TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis the caller holds the mutex (a path it cannot see, e.g. a callback invoked
  // under the lock); checks nothing at run time.
  void AssertHeld() const ASYMNVM_ASSERT_CAPABILITY(this) {}

  // The std::mutex underneath, for MutexLock (see the header comment); not for locking directly.
  std::mutex& native() ASYMNVM_RETURN_CAPABILITY(this) { return mu_; }

 private:
  std::mutex mu_;
};

// The scoped guard of a Mutex: locks in the constructor, unlocks in the destructor if still held,
// and can drop and re-take the lock in between (unlock() / lock(), what std::unique_lock was used
// for). native() is the std::unique_lock a std::condition_variable waits on.
class ASYMNVM_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ASYMNVM_ACQUIRE(mu) : lock_(mu.native()) {}
  // Does not lock: the guard starts released (std::defer_lock).
  MutexLock(Mutex& mu, std::defer_lock_t) ASYMNVM_EXCLUDES(mu)
      : lock_(mu.native(), std::defer_lock) {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;
  ~MutexLock() ASYMNVM_RELEASE() {}

  void lock() ASYMNVM_ACQUIRE() { lock_.lock(); }
  void unlock() ASYMNVM_RELEASE() { lock_.unlock(); }
  bool owns_lock() const { return lock_.owns_lock(); }

  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

// std::shared_mutex as a capability: writers hold it exclusively, readers shared.
class ASYMNVM_CAPABILITY("mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void lock() ASYMNVM_ACQUIRE() { mu_.lock(); }
  void unlock() ASYMNVM_RELEASE() { mu_.unlock(); }
  void lock_shared() ASYMNVM_ACQUIRE_SHARED() { mu_.lock_shared(); }
  void unlock_shared() ASYMNVM_RELEASE_SHARED() { mu_.unlock_shared(); }
  void AssertHeld() const ASYMNVM_ASSERT_CAPABILITY(this) {}
  void AssertReaderHeld() const ASYMNVM_ASSERT_SHARED_CAPABILITY(this) {}

 private:
  std::shared_mutex mu_;
};

class ASYMNVM_SCOPED_CAPABILITY WriterMutexLock {
 public:
  explicit WriterMutexLock(SharedMutex& mu) ASYMNVM_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  WriterMutexLock(const WriterMutexLock&) = delete;
  WriterMutexLock& operator=(const WriterMutexLock&) = delete;
  ~WriterMutexLock() ASYMNVM_RELEASE() { mu_.unlock(); }

 private:
  SharedMutex& mu_;
};

class ASYMNVM_SCOPED_CAPABILITY ReaderMutexLock {
 public:
  explicit ReaderMutexLock(SharedMutex& mu) ASYMNVM_ACQUIRE_SHARED(mu) : mu_(mu) {
    mu_.lock_shared();
  }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;
  ~ReaderMutexLock() ASYMNVM_RELEASE() { mu_.unlock_shared(); }

 private:
  SharedMutex& mu_;
};

}  // namespace asymnvm
