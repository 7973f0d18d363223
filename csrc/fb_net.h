/* fb_net.h: socket reads that carry the kernel's receive timestamp. */
#ifndef FB_NET_H
#define FB_NET_H
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <time.h>

#ifndef SO_TIMESTAMPNS
#define SO_TIMESTAMPNS 35
#endif
#ifndef SCM_TIMESTAMPNS
#define SCM_TIMESTAMPNS SO_TIMESTAMPNS
#endif

/* Ask for SO_TIMESTAMPNS receive stamps and disable Nagle. Returns 1 if stamps were
 * enabled, 0 if the socket refused them (the caller then stamps in user space). */
static inline int fb_net_setup(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one)) == 0;
}

/* One non-blocking read. Returns bytes read, 0 at EOF, or -errno. *kernel_rt_ns gets the
 * CLOCK_REALTIME receive stamp of the newest segment in the read, or 0 if none came. */
static inline ssize_t fb_net_recv(int fd, char *buf, size_t cap, int64_t *kernel_rt_ns) {
    struct iovec iov;
    struct msghdr msg;
    union { char raw[CMSG_SPACE(sizeof(struct timespec)) * 2]; struct cmsghdr align; } ctl;
    struct cmsghdr *c;
    ssize_t n;

    iov.iov_base = buf;
    iov.iov_len = cap;
    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.raw;
    msg.msg_controllen = sizeof(ctl.raw);
    *kernel_rt_ns = 0;
    do {
        n = recvmsg(fd, &msg, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n < 0) return -errno;
    for (c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
            struct timespec ts;
            memcpy(&ts, CMSG_DATA(c), sizeof(ts));
            *kernel_rt_ns = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
        }
    }
    return n;
}

/* Whether nothing waits unread on the socket: 1 when a recv would block (the connection may carry
 * another request), 0 when bytes or the peer's FIN wait, or on an error. */
static inline int fb_net_quiet(int fd) {
    char byte;
    ssize_t n;
    do {
        n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

/* One non-blocking send of several buffers, in order, as one stream of bytes: sendmsg gathers
 * them, so the caller need not join them first. Returns bytes sent or -errno. */
static inline ssize_t fb_net_sendv(int fd, const struct iovec *parts, int count) {
    struct msghdr msg;
    ssize_t n;
    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = (struct iovec *)parts;
    msg.msg_iovlen = (size_t)count;
    do {
        n = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    return n < 0 ? -errno : n;
}

/* One non-blocking send. Returns bytes sent or -errno. */
static inline ssize_t fb_net_send(int fd, const char *buf, size_t len) {
    ssize_t n;
    do {
        n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    return n < 0 ? -errno : n;
}
#endif
