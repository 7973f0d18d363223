# cython: language_level=3
# StreamConnection: one keep-alive connection: sends a request, reads and classifies its response,
# writes its row and chunk figures. Included by engine.pyx. Rule zero: per token nothing enters
# Python; per request one Future resolves.


cdef enum:
    SEND_PARTS = 256  # iovecs of one send: the HTTP head, the length line, a body's head, runs and tail


cdef class StreamConnection:
    """One keep-alive HTTP/1.1 connection carrying one streamed request at a time.

    Reads are driven by the run's inner epoll set (``RunState.drain``) and done with ``recvmsg`` in C, so each read
    comes with the kernel's receive timestamp where the socket gives one; every event parsed
    from that read carries that stamp.
    """

    def __cinit__(self, RunState run, object loop, object sock, object ssl_object=None,
                  object ssl_in=None, object ssl_out=None):
        self.c.sse.buf = <char *>_counted_malloc(FIRST_EVENT_BUFFER)
        if self.c.sse.buf == NULL:
            raise MemoryError()
        self.c.sse.cap = FIRST_EVENT_BUFFER
        if FB_DEBUG:
            _debug.connections_made += 1  # freed: __dealloc__ finds this buffer
        self.run = run
        self.loop = loop
        self.sock = sock
        self.fd = sock.fileno()
        self.ssl_object = ssl_object
        self.ssl_in = ssl_in
        self.ssl_out = ssl_out
        self._py_why = None
        self.kernel_timestamps = run.kernel_timestamps and fb_net_setup(self.fd) == 1
        self.c.max_event_bytes = run.max_event_bytes
        self.c.save_outputs = run.save_outputs
        self.c.keep_answer = run.keep_answers
        self.c.whole = run.whole_answers
        self.c.max_whole_bytes = run.max_answer_bytes or WHOLE_ANSWER_CAP
        if run.api is not None:
            self.c.api = &run.api.table
            self.c.end_why = run.api.end_why
        else:
            self.c.api = NULL
            self.c.end_why = "the stream ended without data: [DONE]"
        self.c.gap_counts = &run.gap_counts[0]
        self.busy = False
        self.closed = False
        self.requests_served = 0
        self.in_ends_set = False
        # Where the state a read touches ends: the object's own fields, then c up to the HTTP
        # line buffer (conn.pxd orders both so).
        run.sets.hot_bytes = <size_t>(<char *>&self.c.http.line - <char *><void *>self)
        run.connections_opened += 1
        run.sets.register(self)

    def __dealloc__(self):
        if FB_DEBUG and self.c.sse.buf != NULL:
            _debug.connections_freed += 1
        _counted_free(self.c.sse.buf)
        _counted_free(self.c.req.ev)
        _counted_free(self.c.out_buf)
        _counted_free(self.c.answer_buf)
        _counted_free(self.c.whole_buf)

    @property
    def is_usable(self):
        return not self.closed and not self.busy

    @property
    def uses_kernel_timestamps(self):
        return self.kernel_timestamps

    def start(self, object body, int64_t row, int64_t scheduled_ns, int64_t connect_ns=0):
        """Send one request, the run's head with ``body`` (bytes or BodyParts), and return a Future that
        resolves to an ErrorClass value.

        In closed loop (``RunState.claim_rows``) a connection that stays usable goes straight on to
        the run's next request from inside the core, and in open loop (``dispatch_arrivals``) to the
        next one when it is already due, so the Future resolves only when the chain ends: with an
        error that closed the connection, at the stop, or when no request is left (or due).
        ``row`` and ``last_was_reused`` then describe the request that ended it.
        """
        if self.busy or self.closed:
            raise RuntimeError("connection is busy or closed")
        _check_body(body)
        self.busy = True
        self.fut = self.loop.create_future()
        self.run.slots.in_flight += 1
        self._begin(body, row, scheduled_ns, connect_ns)
        return self.fut

    cdef _start_from_core(self, int64_t row, int64_t scheduled_ns):
        """The core's own send of an arrival (RunState.dispatch_arrivals, Dispatcher): no Future; the chain's
        end gives the connection back to the pool."""
        if FB_DEBUG:
            _debug_assert(not self.busy and not self.closed, "the core sent on a busy or closed connection")
        self.busy = True
        self.fut = None
        self.run.slots.in_flight += 1
        self._begin(self.run.body(row), row, scheduled_ns, 0)

    cdef _begin(self, object body, int64_t row, int64_t scheduled_ns, int64_t connect_ns):
        cdef fb_req_t *r = &self.c.req
        cdef char length_line[32]  # "%zd\r\n\r\n": at most 19 digits and 4 bytes
        cdef Py_ssize_t body_len = (PyBytes_GET_SIZE(body) if type(body) is bytes
                                    else (<BodyParts>body).length)
        cdef Py_ssize_t length_len = snprintf(length_line, sizeof(length_line), "%zd\r\n\r\n", body_len)
        if FB_DEBUG:
            _debug.requests_begun += 1
            _debug_assert(self.busy and not self.closed and self.send_task is None,
                          "a request begun on a connection not ready for it")
            _debug_assert(row < self.run.n_rows, "a request row beyond the table")
        fb_http_init(&self.c.http)
        fb_sse_init(&self.c.sse, self.c.sse.buf, self.c.sse.cap)
        self.c.max_events = self.run.max_request_events
        self.reused = self.requests_served > 0
        r.row = row
        r.scheduled_ns = scheduled_ns
        r.connect_ns = connect_ns
        r.first_byte_ns = r.first_token_ns = r.first_answer_ns = r.end_ns = 0
        r.prompt_tokens = r.cached_tokens = -1
        r.completion_tokens = 0
        r.events = r.n_ev = r.usage_chunks = 0
        r.usage_seen = r.usage_untrusted = r.done_seen = r.finish_seen = 0
        r.error = ERR_OK
        r.why = NULL
        self.c.errtext_len = 0
        self.c.head_len = 0
        self.c.read_output_events = 0
        self.c.read_ts = 0
        self.c.out_len = 0
        self.c.answer_len = 0
        self.c.whole_len = 0
        r.max_chunk_tokens = 0
        self.expected_tokens = 0
        if self.run.has_expected and 0 <= row < self.run.expected_tokens.shape[0]:
            self.expected_tokens = self.run.expected_tokens[row]
        r.sent_ns = fb_now_ns()
        self._send(body, length_line, length_len,
                   self.run.head if self.run.row_heads is None or row < 0 else <bytes>self.run.row_heads[row])
        if self.in_ends_set and not self.closed:
            # Back to the inner set after the send, not before: the two epoll_ctl calls (a few us
            # each here) would otherwise delay every request sent on a connection that was watched
            # for its last one's end (a closed loop's refill, an open-loop arrival from the pool).
            self.run.sets.move(self, False)

    @property
    def row(self):
        """Row of the request in flight, or of the last one."""
        return self.c.req.row

    @property
    def sent_ns(self):
        """When the request in flight (or the last one) was sent."""
        return self.c.req.sent_ns

    @property
    def last_was_reused(self):
        """The request in flight (or the last one) went out on a connection that had served before."""
        return self.reused

    @property
    def tokens_in_flight(self):
        """Output tokens the server's usage has counted so far for the request in flight; 0 once it
        ended (its tokens are then in the run's ``output_tokens``) or with no usage yet. For the
        progress display, read between drains: nothing on the hot path."""
        if not self.busy or self.c.req.end_ns != 0:
            return 0
        return self.c.req.completion_tokens

    cdef _send(self, object body, char *length_line, Py_ssize_t length_len, bytes head):
        """Send the run's head, the body's length line and the body as they lie, in one sendmsg: no
        joined copy per request (a BodyParts body: its head, its runs of the shared buffer, its tail).
        TLS, a send the kernel takes only part of, and a body of more parts than SEND_PARTS join them
        (a copy that TLS makes anyway; the loop sends the rest). ``head``: the run's, or the row's own."""
        cdef iovec parts[SEND_PARTS]
        cdef Py_ssize_t n, total
        cdef int count = 3
        cdef bytes wire = None
        if self.ssl_object is None:
            parts[0].iov_base = <char *>head
            parts[0].iov_len = len(head)
            parts[1].iov_base = length_line
            parts[1].iov_len = length_len
            if type(body) is bytes:
                parts[2].iov_base = <char *>body
                parts[2].iov_len = PyBytes_GET_SIZE(body)
                total = PyBytes_GET_SIZE(body)
            else:
                count = (<BodyParts>body).fill(&parts[2], SEND_PARTS - 2) + 2
                total = (<BodyParts>body).length
            if count >= 3:
                n = fb_net_sendv(self.fd, parts, count)
                if n == len(head) + length_len + total:
                    return
            else:  # too many parts for one sendmsg: joined
                wire = _wire(head, length_line, length_len, body)
        else:
            self.ssl_object.write(_wire(head, length_line, length_len, body))
            wire = self.ssl_out.read()
        if wire is not None:  # TLS's bytes, or the joined body: one send of them
            n = fb_net_send(self.fd, wire, len(wire))
            if n == len(wire):
                return
        if n >= 0 or n == -EAGAIN:
            # The socket buffer is full: let the loop finish the write.
            if wire is None:
                wire = _wire(head, length_line, length_len, body)
            self.send_task = self.loop.create_task(self._send_rest(wire[max(n, 0):]))
            return
        self._fail_now(ERR_CONNECT, "send failed: %s" % os.strerror(-n))

    async def _send_rest(self, bytes rest):
        try:
            await self.loop.sock_sendall(self.sock, rest)
        except OSError as exc:
            self.send_task = None
            if self.busy:
                self._fail_now(ERR_CONNECT, "send failed: %s" % exc)
        else:
            self.send_task = None

    def abort(self, int error, str why=""):
        """End the request in flight now (timeout, time cap) and close the connection."""
        if self.busy:
            self.c.read_ts = fb_now_ns()
            _fail(&self.c, error, NULL)
            self._py_why = why
            self.close()
            self._finish()
        self.close()

    def close(self):
        if not self.closed:
            self.closed = True
            self.run.sets.unregister(self)
            if self.send_task is not None:
                # The loop still watches the fd for the rest of a request; a socket opened next may
                # get the same number, so the watch goes before the fd does.
                self.loop.remove_writer(self.fd)
                self.send_task.cancel()
                self.send_task = None
            self.sock.close()

    cdef _fail_now(self, int error, str why):
        self.c.read_ts = fb_now_ns()
        _fail(&self.c, error, NULL)
        self._py_why = why
        self.close()
        self._finish()

    cdef Py_ssize_t _read_ready(self, Py_ssize_t budget) except -1:
        """Read what is ready, up to ``budget`` bytes (ReadySet.drain's share for this connection in this
        wake-up); returns the bytes read. A server that writes faster than the client parses leaves
        bytes unread here: the socket stays ready (level-triggered), so the rest waits for the next
        wake-up, after the loop's timers (the time cap, --request-timeout) and the other connections."""
        cdef int64_t kernel_rt_ns, ts
        cdef Py_ssize_t n, want, total = 0
        cdef char *buf = self.run.read_buffer
        while not self.closed and total < budget:
            want = budget - total if budget - total < READ_BUFFER_BYTES else READ_BUFFER_BYTES
            n = fb_net_recv(self.fd, buf, want, &kernel_rt_ns)
            if n > 0:
                total += n
                if kernel_rt_ns:
                    ts = kernel_rt_ns - self.run.realtime_offset_ns
                    self.run.kernel_reads += 1
                else:
                    ts = fb_now_ns()
                self.run.reads += 1
                self.c.read_output_events = 0  # per socket read, however many TLS records it holds
                if not self.busy:
                    # Bytes nobody asked for: the connection is out of step; drop it.
                    self.close()
                    return total
                if self.ssl_object is not None:
                    self._feed_tls(buf, n, ts)
                else:
                    self._feed(buf, n, ts)
                if self.run.sets.watching_ends:
                    self._watch_if_ending()
                if n < want and not (
                        self.busy and self.c.req.done_seen and self.c.http.state == FB_HTTP_S_BODY_EOF):
                    return total
                # else: more may be waiting; or a close-delimited stream said [DONE]: look for its FIN
                # now, not a wake-up later (within the budget, so a stream after [DONE] cannot hold us)
            elif n == 0:
                self._on_eof()
                return total
            elif n == -EAGAIN:
                return total
            else:
                if self.busy:
                    self._fail_now(ERR_PROTOCOL if self.c.req.first_byte_ns else ERR_CONNECT,
                                   "connection error: %s" % os.strerror(-n))
                self.close()
                return total
        return total

    cdef void _watch_if_ending(self) noexcept:
        """Coalescing: once at most one more chunk (of the largest size so far) is left of the
        stream, move the connection to the run's ends set, watched on every arrival. Without per-chunk
        usage (a typed API's stream, chat's with usage only at the end) the tokens so far are unknown:
        the stream is watched once its output events reach the share of the tokens asked for at which
        the run's earlier such streams ended (ReadySet.learn_end; until one has ended, once the events
        are one short of the tokens asked for, each event being at least one token)."""
        cdef fb_req_t *r = &self.c.req
        cdef int64_t expected, left
        if self.in_ends_set or not self.busy or self.closed:
            return
        expected = self.expected_tokens
        if expected <= 0:
            return
        if r.usage_chunks:
            left = expected - r.completion_tokens
            if left <= (r.max_chunk_tokens if r.max_chunk_tokens > 1 else 1):
                self.run.sets.move(self, True)
        elif (<int64_t>r.n_ev + 1) * END_RATIO_BUCKETS >= self.run.sets.watch_bucket * expected:
            self.run.sets.move(self, True)

    cdef _feed_tls(self, char *buf, Py_ssize_t n, int64_t ts):
        cdef bytes plain
        self.ssl_in.write(buf[:n])
        while self.busy:
            try:
                plain = self.ssl_object.read(READ_BUFFER_BYTES)
            except ssl.SSLWantReadError:
                return
            except ssl.SSLError as exc:
                self._fail_now(ERR_PROTOCOL, "TLS error: %s" % exc)
                return
            if not plain:
                self._on_eof()
                return
            self._feed(plain, len(plain), ts)

    cdef _feed(self, const char *buf, Py_ssize_t n, int64_t ts):
        cdef Py_ssize_t used
        cdef fb_req_t *r = &self.c.req
        self.c.read_ts = ts
        if r.first_byte_ns == 0:
            r.first_byte_ns = ts
        used = fb_http_feed(&self.c.http, buf, n, _on_body, &self.c)
        if FB_DEBUG:
            _debug_assert(used <= n, "the HTTP reader used more bytes than it was given")
            _debug_assert(self.c.sse.len <= self.c.sse.cap and self.c.errtext_len <= ERRTEXT_BYTES,
                          "a connection's buffer overrun")
        self.run.multi_event_reads += self.c.multi_event_reads
        self.run.output_events += self.c.output_events
        self.c.multi_event_reads = 0
        self.c.output_events = 0
        if used < 0:
            if self._out_of_step(used):
                r.first_byte_ns = 0  # none of these bytes answered this request
                _fail(&self.c, ERR_CONNECT, NULL)
                self._py_why = ("the kept-alive connection held bytes that were not a response to this request "
                                "(the last response ran past its length?)")
            elif used != -FB_ERR_CALLBACK:
                _fail(&self.c, ERR_PROTOCOL, _http_error_text(-used))
            self.close()
            self._finish()
            return
        if self.c.http.state == FB_HTTP_S_DONE:
            # Bytes after the response, or a server that will close, or bytes (or its FIN) already
            # waiting unread on a plain socket: no reuse. The look costs one syscall per response.
            if used < n or not self.c.http.keep_alive or (
                    self.ssl_object is None and not fb_net_quiet(self.fd)):
                self.close()
            self._finish()

    cdef bint _out_of_step(self, Py_ssize_t used) noexcept:
        """The response failed before its status line on a connection that served before: what came
        was not an answer to this request but bytes a server left after the last one (more than its
        Content-Length, say). The connection's fault, like a stale keep-alive: CONNECT, sent again on
        a new connection."""
        return used != -FB_ERR_CALLBACK and self.reused and self.c.http.status == 0

    cdef _on_eof(self):
        if self.busy:
            if fb_http_feed_eof(&self.c.http) == 0:
                if self.c.read_ts == 0:  # else: the body ended with the last data read, not the FIN's
                    self.c.read_ts = fb_now_ns()   # (possibly coalesced) processing
                self.close()
                self._finish()
            else:
                self._fail_now(
                    ERR_PROTOCOL if self.c.req.first_byte_ns else ERR_CONNECT,
                    "the server closed the connection mid-response"
                    if self.c.req.first_byte_ns else "the server closed the connection before responding")
        self.close()

    cdef _finish(self):
        """Classify, write the request's row, record its chunk figures, resolve its Future."""
        cdef fb_req_t *r = &self.c.req
        cdef int status = self.c.http.status
        cdef int usage
        cdef int64_t row = r.row, due = 0
        cdef RunState run = self.run
        cdef Dispatcher dispatcher
        if FB_DEBUG:
            _debug.requests_ended += 1
            _debug_assert(self.busy and r.end_ns == 0, "a request ended twice, or one never begun")
        if r.error == ERR_OK:
            if status < 200 or status >= 300:
                r.error = ERR_HTTP_STATUS
                if status == 400 and b"context length" in self._errtext():
                    r.error = ERR_CONTEXT_LENGTH
            elif self.c.whole:
                _scan_whole(&self.c)  # one JSON answer, not a stream: its usage, scanned once (whole.pyx)
            elif not self.c.http.event_stream:
                r.error = ERR_PROTOCOL
                r.why = "the response is not an event stream (is \"stream\" honoured?)"
            elif not r.done_seen:
                # Every OpenAI-compatible server ends a stream with [DONE]; without it the end of
                # the response may be a cut, not a finish.
                r.error = ERR_PROTOCOL
                r.why = self.c.end_why
                if self.c.http.content_coded:  # a coded body reads as no SSE at all ("none" is harmless)
                    r.why = "the response is compressed (Content-Encoding), which fastbench never asks for"
                elif self.c.head_len:  # another protocol's stream, say: its first bytes name it
                    self._py_why = "%s; the stream began %r" % ((<bytes>r.why).decode(), self._body_head())
            elif r.n_ev == 0 and not r.usage_seen and not r.finish_seen:
                # An answer of no tokens still says why it stopped (finish_reason) or what it
                # counted (usage); a bare [DONE] says neither.
                r.error = ERR_PROTOCOL
                r.why = "the stream ended without output: no text, usage or finish_reason"
        r.end_ns = self.c.read_ts if self.c.read_ts else fb_now_ns()
        if self.c.whole:  # one answer: its usage is the final one, or none
            usage = USAGE_INCONSISTENT if r.usage_untrusted else USAGE_FINAL if r.usage_seen else USAGE_NONE
        elif r.usage_untrusted or (r.usage_seen and (
                (r.completion_tokens == 0 and r.n_ev > 0)  # text arrived, yet no token counted
                or 0 < self.expected_tokens < r.completion_tokens)):  # more than max_tokens
            usage = USAGE_INCONSISTENT
        elif r.usage_seen and r.usage_chunks == r.n_ev:
            usage = USAGE_PER_CHUNK
        elif r.usage_seen:
            usage = USAGE_FINAL
        else:
            usage = USAGE_NONE
        if (row >= 0 and run.sets.watching_ends and r.error == ERR_OK and usage == USAGE_FINAL and r.n_ev > 0
                and 0 < self.expected_tokens == r.completion_tokens):  # ended at its length: its events say
            run.sets.learn_end(r.n_ev, self.expected_tokens)           # when such streams end
        if row >= 0 and run.tick is not None and run.tick.auto and r.error != ERR_CANCELLED:
            # automatic coalescing keeps the streams open by these (coalesce.pyx)
            run.tick.count_end(<double>(r.end_ns - r.sent_ns), self.in_ends_set)
        if row >= 0:
            self._write_row(row, status, usage)
            if r.error == ERR_OK:
                self._record_chunks(usage)
                self.run.completed += 1
                if self.c.save_outputs:
                    self.run.outputs[row] = self.c.out_buf[:self.c.out_len]
                if self.c.keep_answer:
                    self.run.answers[row] = self.c.answer_buf[:self.c.answer_len]
                if self.run.keep_chunk_stamps:
                    self.run.chunk_stamps[row] = self._chunk_stamps()
            elif r.error != ERR_CANCELLED:
                self.run.failed += 1
                self.run.error_messages[row] = self._error_message(status)
                self.run._check_error_rate()
            else:
                self.run.error_messages[row] = self._error_message(status)  # why it was cut short
        self.requests_served += 1
        if self.send_task is not None:
            # Answered before its request was all sent (an early 413, say): the rest of the body
            # would read as the next request, so the connection is not reused.
            self.close()
        if row >= 0 and not self.closed and not run.slots.stopping and run.chain is not None:
            # The slot freed at this response's end: the schedule's next request goes out now, without
            # a trip through Python (closed loop: the next row; open loop: an arrival that waited for a
            # slot; see Claims.chain).
            nxt = run.chain.chain(r.end_ns, &due)
            if nxt >= 0:
                self._begin(run.body(nxt), nxt, due, 0)
                return
        self.busy = False
        run.slots.in_flight -= 1
        fut = self.fut
        self.fut = None
        dispatcher = run.dispatcher
        if fut is not None:
            if not fut.done():
                fut.set_result(r.error)
        elif dispatcher is not None:
            dispatcher.chain_ended(self, r.error)
        if dispatcher is not None:
            # A slot freed, and maybe a connection: an arrival that waited for either goes now.
            dispatcher.dispatch()
            if run.slots.in_flight == 0 and dispatcher.arrivals.head() >= dispatcher.arrivals.n_rows:
                dispatcher.ask_python()  # the last request ended

    cdef bytes _chunk_stamps(self):
        """The request's output chunks' receive stamps, as int64 ns in one bytes object (per request,
        only when asked: the per-token path stays as it is)."""
        cdef fb_req_t *r = &self.c.req
        cdef bytes out = PyBytes_FromStringAndSize(NULL, <Py_ssize_t>(r.n_ev * sizeof(int64_t)))
        cdef int64_t *stamps = <int64_t *>PyBytes_AS_STRING(out)
        cdef size_t i
        for i in range(r.n_ev):
            stamps[i] = r.ev[i].ts
        return out

    cdef bytes _errtext(self):
        return self.c.errtext[:self.c.errtext_len]

    cdef bytes _body_head(self):
        return self.c.head[:self.c.head_len]

    cdef str _error_message(self, int status):
        cdef fb_req_t *r = &self.c.req
        text = self._errtext().decode("utf-8", "replace").strip()
        if len(text) > 300:
            text = text[:300] + "..."
        if self._py_why:
            why = self._py_why
            self._py_why = None
        elif r.why == _EVENT_CAP_WHY:
            why = "%s of %d (a stream without end?)" % ((<bytes>r.why).decode(), self.c.max_events)
        elif r.why != NULL:
            why = (<bytes>r.why).decode()
        elif r.error in (ERR_HTTP_STATUS, ERR_CONTEXT_LENGTH):
            why = "HTTP %d" % status
        else:
            why = ""
        return "%s: %s" % (why, text) if text else why

    cdef void _write_row(self, int64_t row, int status, int usage) noexcept:
        cdef fb_req_t *r = &self.c.req
        cdef int64_t[:, ::1] rows = self.run.rows
        cdef fb_row_t *out = <fb_row_t *>&rows[row, 0]  # RunState checked the table's width
        cdef int64_t output_tokens, max_tokens = r.max_chunk_tokens
        if FB_DEBUG:
            _debug_assert(r.n_ev <= r.cap_ev and <size_t>r.usage_chunks <= r.n_ev, "more events than stamps")
        if usage == USAGE_NONE or usage == USAGE_INCONSISTENT:
            output_tokens = r.n_ev
        else:
            output_tokens = r.completion_tokens
        if usage != USAGE_PER_CHUNK and r.n_ev:
            max_tokens = 1
        out.index = row
        out.scheduled_ns = r.scheduled_ns
        out.sent_ns = r.sent_ns
        out.first_byte_ns = r.first_byte_ns
        out.first_token_ns = r.first_token_ns
        out.first_answer_ns = r.first_answer_ns
        out.end_ns = r.end_ns
        out.prompt_tokens = r.prompt_tokens
        out.output_tokens = output_tokens
        out.chunks = r.n_ev
        out.events = r.events
        out.max_chunk_tokens = max_tokens
        out.error = r.error
        out.http_status = status
        out.usage_source = usage
        out.connect_ns = r.connect_ns
        out.cached_tokens = r.cached_tokens
        self.run.output_tokens += output_tokens

    cdef void _record_chunks(self, int usage) noexcept:
        """Chunk gaps, per-token gaps and skew of a completed request into the run's histograms."""
        cdef fb_req_t *r = &self.c.req
        cdef size_t i
        cdef int64_t gap, k
        for i in range(r.n_ev):
            if r.ev[i].sent > 0:
                self.run.skew.record(r.ev[i].ts - self.run.skew_offset_ns - r.ev[i].sent, 1)
            if i == 0:
                continue
            gap = r.ev[i].ts - r.ev[i - 1].ts
            self.run.itl_chunk.record(gap, 1)
            # Without per-chunk usage a chunk is taken as one token (stated in the result).
            k = r.ev[i].tokens if usage == USAGE_PER_CHUNK and r.ev[i].tokens > 0 else 1
            self.run.itl_token.record(gap // k, k)

