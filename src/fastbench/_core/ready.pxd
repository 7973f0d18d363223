# Wake-ups: the epoll sets the event loop's wake-ups drain (ready.pyx). Included by engine.pxd.


cdef enum:
    READY_EVENTS = 256           # ready connections taken per epoll_wait
    END_RATIO_BUCKETS = 256      # ends set: a stream's events per token asked for, in 1/256ths (ready.pyx)
    WAKE_READ_BYTES = 1048576    # bytes one drain of a set reads in all, shared by its ready connections (4 KiB
                                 # each at least, READY_EVENTS to a batch), so a server that writes faster than
                                 # the client parses never holds the loop


cdef class ReadySet:
    # The epoll sets the event loop's wake-ups drain: the inner set of every connection, and the
    # ends set of those whose stream may end with their next chunk (coalescing, see watch_ends).
    cdef int epfd
    cdef int ends_epfd
    cdef bint watching_ends            # coalescing with expected lengths: the split above is on
    cdef set conns                     # the connections registered (keeps their pointers valid)
    cdef size_t hot_bytes              # a connection's bytes a read touches (prefetched, see drain)
    cdef epoll_event *ready            # epoll_wait's output array
    cdef int64_t ends_watched          # requests moved to the ends set
    # Streams without per-chunk usage: the events per token asked for (in END_RATIO_BUCKETS ths) of
    # those that ended at their length (decayed), and the share of them a stream must reach to be
    # watched (END_RATIO_BUCKETS: every event one token, the rule without them). See learn_end.
    cdef int64_t end_ratio_counts[END_RATIO_BUCKETS + 1]
    cdef int64_t end_ratio_total
    cdef int64_t watch_bucket
    cdef register(self, StreamConnection conn)
    cdef unregister(self, StreamConnection conn)
    cdef void move(self, StreamConnection conn, bint to_ends) noexcept
    cdef void learn_end(self, int64_t events, int64_t expected) noexcept
    cdef drain(self, int epfd, Dispatcher dispatcher)
