/* A C program speaking the softoe host interface through the generated
 * header: it maps a region the engine created (here: a test in Rust that
 * plays the engine), checks the header, posts NOP commands and reads their
 * completions. Usage: rings PATH-TO-REGION-FD
 *
 * Everything a C client needs is in softoe_abi.h; indices are accessed with
 * acquire/release atomics exactly as the Rust side does.
 */
#include <fcntl.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "softoe_abi.h"

_Static_assert(sizeof(softoe_RegionHeader) == 1024, "header is 1 KiB");
_Static_assert(offsetof(softoe_RegionHeader, cmd_tail) == 256, "cmd_tail line");
_Static_assert(offsetof(softoe_RegionHeader, changed_offset) == 96, "changed_offset in line 0");
_Static_assert(offsetof(softoe_RegionHeader, event_seq) == 896, "event_seq line");
_Static_assert(sizeof(softoe_Command) == 64, "command is 64 bytes");
_Static_assert(sizeof(softoe_Completion) == 32, "completion is 32 bytes");
_Static_assert(sizeof(softoe_SockSlot) == 128, "slot is 128 bytes");
_Static_assert(offsetof(softoe_SockSlot, rx_head) == 64, "rx_head line");

#define N 100

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s REGION\n", argv[0]);
        return 2;
    }
    int fd = open(argv[1], O_RDWR);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        perror("open region");
        return 1;
    }
    unsigned char *base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    softoe_RegionHeader *h = (softoe_RegionHeader *)base;
    if (h->magic != (uint64_t)softoe_MAGIC || h->version != softoe_VERSION ||
        h->region_len > (uint64_t)st.st_size) {
        fprintf(stderr, "not a softoe region of version %d\n", softoe_VERSION);
        return 1;
    }
    softoe_Command *cmds = (softoe_Command *)(base + h->cmd_offset);
    softoe_Completion *cmps = (softoe_Completion *)(base + h->cmp_offset);
    uint32_t cmask = h->cmd_entries - 1, pmask = h->cmp_entries - 1;

    uint32_t tail = __atomic_load_n(&h->cmd_tail, __ATOMIC_RELAXED);
    uint32_t head = __atomic_load_n(&h->cmp_head, __ATOMIC_RELAXED);
    int sent = 0, done = 0;
    while (done < N) {
        /* Post as many commands as fit. */
        while (sent < N && tail - __atomic_load_n(&h->cmd_head, __ATOMIC_ACQUIRE) < h->cmd_entries) {
            softoe_Command c = {0};
            c.opcode = SOFTOE_OPCODE_NOP;
            c.tag = (uint64_t)sent + 1;
            cmds[tail & cmask] = c;
            tail++;
            sent++;
        }
        __atomic_store_n(&h->cmd_tail, tail, __ATOMIC_RELEASE);
        /* Read completions. */
        uint32_t avail = __atomic_load_n(&h->cmp_tail, __ATOMIC_ACQUIRE);
        if (avail - head > h->cmp_entries) {
            fprintf(stderr, "completion ring corrupt\n");
            return 1;
        }
        while (head != avail) {
            softoe_Completion r = cmps[head & pmask];
            head++;
            if (r.tag != (uint64_t)done + 1 || r.result != 0) {
                fprintf(stderr, "completion %d: tag %llu result %lld\n", done,
                        (unsigned long long)r.tag, (long long)r.result);
                return 1;
            }
            done++;
        }
        __atomic_store_n(&h->cmp_head, head, __ATOMIC_RELEASE);
        if (head == avail)
            sched_yield();
    }
    printf("ok: %d commands, session %u\n", done, h->session);
    return 0;
}
