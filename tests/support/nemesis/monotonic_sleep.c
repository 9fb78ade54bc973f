/* Sleeps on CLOCK_MONOTONIC go straight to the kernel, in front of libfaketime (tests/support/nemesis/clocks.py).
 *
 * libfaketime 0.9.10 (Debian bookworm's) rewrites the deadline of clock_nanosleep(CLOCK_MONOTONIC,
 * TIMER_ABSTIME, ...) even when FAKETIME_DONT_FAKE_MONOTONIC=1 leaves that clock alone, and the kernel refuses the
 * result with EINVAL (libfaketime issue 426). Python 3.11's time.sleep() is exactly that call, so under the bare
 * library every time.sleep() of a broker raises OSError. Loaded before libfaketime (LD_PRELOAD lists it first),
 * this clock_nanosleep passes monotonic sleeps to the kernel unchanged (the clock is not faked, so neither is a
 * deadline on it) and hands every other clock to the next definition, libfaketime's.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef int (*clock_nanosleep_fn)(clockid_t, int, const struct timespec *, struct timespec *);

int clock_nanosleep(clockid_t clock_id, int flags, const struct timespec *request, struct timespec *remain) {
    if (clock_id == CLOCK_MONOTONIC) {
        /* clock_nanosleep returns the error number itself, never -1 with errno */
        return syscall(SYS_clock_nanosleep, clock_id, flags, request, remain) == 0 ? 0 : errno;
    }
    static clock_nanosleep_fn next;
    if (next == NULL) {
        next = (clock_nanosleep_fn)dlsym(RTLD_NEXT, "clock_nanosleep");
        if (next == NULL)
            return ENOSYS;
    }
    return next(clock_id, flags, request, remain);
}
