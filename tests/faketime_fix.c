/* Work-around for libfaketime 0.9.10 (Debian 12) bug #426: with
 * FAKETIME_DONT_FAKE_MONOTONIC=1 it corrupts clock_nanosleep(CLOCK_MONOTONIC,
 * TIMER_ABSTIME), which Python 3.11's time.sleep uses, giving EINVAL. Preloaded
 * before libfaketime by the clock-skew test: monotonic sleeps go straight to
 * the kernel (the monotonic clock is not faked), everything else to libfaketime. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
int clock_nanosleep(clockid_t clock_id, int flags, const struct timespec *req, struct timespec *rem) {
    if (clock_id == CLOCK_MONOTONIC) {
        long r = syscall(SYS_clock_nanosleep, clock_id, flags, req, rem);
        return r == 0 ? 0 : errno;
    }
    static int (*next)(clockid_t, int, const struct timespec *, struct timespec *);
    if (!next) next = dlsym(RTLD_NEXT, "clock_nanosleep");
    return next(clock_id, flags, req, rem);
}
