/* Wire protocol of the PVFS-like file service (examples/pvfs-like).
 *
 * One request at a time per connection: a fixed request header, then (for WRITE) `len` bytes of
 * payload; the server answers with a fixed response header, then (for READ) `len` bytes.
 * Integers are in host byte order: client and servers run on the same machine (emulated nodes).
 */
#ifndef PVFS_LIKE_PROTO_H
#define PVFS_LIKE_PROTO_H

#include <stdint.h>

#define PROTO_MAGIC 0x50564653u /* "PVFS" */
#define PROTO_ALIGN 4096u       /* O_DIRECT alignment of offsets, lengths and buffers */
#define PROTO_MAX_LEN (16u << 20)
#define PROTO_MAX_NAME 200u

enum proto_op {
    OP_WRITE = 1,  /* payload -> pwrite(handle, offset) */
    OP_READ = 2,   /* pread(handle, offset) -> payload */
    OP_CREATE = 3, /* name -> new handle (data file + metadata record) */
    OP_REMOVE = 4, /* handle -> unlink + clear metadata record */
    OP_STAT = 5,   /* handle -> metadata record (size) */
};

struct req_hdr {
    uint32_t magic;
    uint32_t op;
    uint64_t handle;
    uint64_t offset;
    uint32_t len;     /* payload bytes (WRITE) or bytes wanted (READ) */
    uint32_t namelen; /* CREATE: name bytes that follow the header */
};

struct resp_hdr {
    uint32_t magic;
    int32_t status; /* 0 or -errno */
    uint64_t handle;
    uint64_t value; /* READ: payload bytes that follow; STAT: file size */
};

static inline uint32_t proto_round_up(uint32_t n)
{
    return (n + PROTO_ALIGN - 1) & ~(PROTO_ALIGN - 1);
}

#endif
