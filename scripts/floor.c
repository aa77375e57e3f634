/*
 * The physical floor of a sampling profiler, for scripts/compare.sh: what
 * no profiler can avoid, and nothing else. On the same schedule as
 * tachyon (a sample due every 1/RATE s after the last one was due, late
 * ones taken at once; the timer slack at its minimum),
 * it makes the process_vm_readv calls of one tachyon sample of the same
 * target, with exactly its remote ranges (traced with strace beforehand),
 * and decodes nothing and writes nothing. It prints what tachyon's
 * summary prints, so that compare.sh reads both alike.
 *
 * Usage: floor PID RATE_HZ SECONDS RANGES
 *   RANGES: one line per range, "CALL ADDR LEN" (CALL numbers the
 *   calls of the sample, from 0; ADDR in hex).
 * Build: gcc -O2 -o floor scripts/floor.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <time.h>

#define MAX_RANGES 65536
#define MAX_CALLS 64

static struct iovec remote[MAX_RANGES], local[MAX_RANGES];
static int call_start[MAX_CALLS + 1];

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: floor PID RATE_HZ SECONDS RANGES\n");
        return 2;
    }
    pid_t pid = (pid_t)atoi(argv[1]);
    double rate = atof(argv[2]), secs = atof(argv[3]);
    FILE *f = fopen(argv[4], "r");
    if (pid <= 0 || rate <= 0 || secs <= 0 || !f) {
        fprintf(stderr, "floor: bad arguments or no ranges file %s\n", argv[4]);
        return 2;
    }
    int n = 0, calls = 0, call;
    unsigned long long addr, len, bytes = 0;
    while (n < MAX_RANGES && fscanf(f, "%d %llx %llu", &call, &addr, &len) == 3) {
        if (call < 0 || call >= MAX_CALLS || call < calls - 1) {
            fprintf(stderr, "floor: calls must be numbered 0.. in order\n");
            return 2;
        }
        while (calls <= call) call_start[calls++] = n;
        remote[n].iov_base = (void *)(uintptr_t)addr;
        remote[n].iov_len = len;
        bytes += len;
        n++;
    }
    call_start[calls] = n;
    fclose(f);
    if (n == 0) {
        fprintf(stderr, "floor: no ranges in %s\n", argv[4]);
        return 2;
    }
    char *buf = malloc(bytes);
    if (!buf) return 1;
    for (int i = 0, off = 0; i < n; off += remote[i].iov_len, i++) {
        local[i].iov_base = buf + off;
        local[i].iov_len = remote[i].iov_len;
    }

    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    uint64_t interval = (uint64_t)(1e9 / rate), start = now_ns();
    uint64_t end = start + (uint64_t)(secs * 1e9), next = start;
    unsigned long long taken = 0, failed = 0;
    for (;;) {
        uint64_t t = now_ns();
        if (t >= end) break;
        if (next > t) {
            struct timespec ts = {(time_t)(next / 1000000000u), (long)(next % 1000000000u)};
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
            if (now_ns() >= end) break;
        }
        int ok = 1;
        for (int c = 0; c < calls; c++) {
            int first = call_start[c], count = call_start[c + 1] - first;
            for (int at = 0; at < count; at += IOV_MAX) {
                int k = count - at < IOV_MAX ? count - at : IOV_MAX;
                if (process_vm_readv(pid, local + first + at, k, remote + first + at, k, 0) < 0) {
                    if (errno == ESRCH) goto done;
                    ok = 0;
                }
            }
        }
        taken += ok;
        failed += !ok;
        next += interval;
    }
done:;
    double took = (now_ns() - start) / 1e9;
    printf("Captured %llu samples in %.2f seconds\n", taken + failed, took);
    printf("Sample rate: %.2f samples/sec\n", (taken + failed) / took);
    printf("Error rate: %.2f\n", taken + failed ? 100.0 * failed / (taken + failed) : 0.0);
    return 0;
}
