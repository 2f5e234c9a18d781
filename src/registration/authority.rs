//! Lets every gRPC client's `:authority` through to the HTTP/2 server.
//!
//! The kubelet dials the registration socket with grpc-go's passthrough
//! target, which sends the socket path, percent-encoded, as `:authority`
//! (`%2Fvar%2Flib%2Fkubelet%2Fplugins_registry%2F...-reg.sock`). grpcio and
//! grpc-java send the path or its encoding too. h2, the HTTP/2 server under
//! tonic, refuses such an authority with `RST_STREAM(PROTOCOL_ERROR)` before
//! any handler runs (hyperium/h2#487, open; see also hyperium/tonic#243). A Go
//! gRPC server accepts any authority, and so must a drop-in registrar.
//!
//! [`AuthorityFix`] wraps each accepted connection and rewrites the client's
//! header blocks on their way to h2: every HEADERS frame (with its
//! CONTINUATION frames) is decoded with the client's HPACK state and encoded
//! again with our own, and an `:authority` that h2 would refuse becomes
//! `localhost`, what grpc-go itself sends for unix sockets. Since every block is
//! re-encoded, h2's HPACK decoder mirrors our encoder and the client's dynamic
//! table (and its size updates) only ever meet our decoder. Padding is dropped,
//! priority fields and the END_STREAM flag are kept, and long blocks are split
//! into CONTINUATION frames no larger than HTTP/2's minimum frame size. Every
//! other frame, and everything h2 sends back, passes through byte for byte, so
//! the rest of HTTP/2 keeps h2's own checks.
//!
//! Drop this layer once h2 accepts such authorities (hyperium/h2#487).

use std::borrow::Cow;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, BufMut, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER_LEN: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// Every HTTP/2 peer accepts frames of this size (SETTINGS_MAX_FRAME_SIZE's minimum).
const MAX_FRAME: usize = 16_384;
/// The HPACK table size h2 advertises (it does not change the default), and
/// so the most a client may use.
const HPACK_TABLE_SIZE: usize = 4096;
/// A header block larger than this closes the connection. The kubelet sends a
/// few hundred bytes; h2 itself refuses header lists over 16 MiB.
const MAX_HEADER_BLOCK: usize = 1 << 20;
/// What replaces an authority h2 would refuse.
const LOCALHOST: &[u8] = b"localhost";

/// A connection whose client-to-server header blocks are rewritten as
/// described in the module docs. Writes pass straight through.
pub(crate) struct AuthorityFix<S> {
    inner: S,
    /// Bytes read from the client, not yet processed.
    input: BytesMut,
    /// Processed bytes, not yet handed to h2.
    output: BytesMut,
    state: State,
    rewriter: Rewriter,
    eof: bool,
}

enum State {
    /// Waiting for the 24-byte connection preface.
    Preface,
    /// At a frame boundary.
    Frame,
    /// Inside the payload of a frame that passes through unchanged.
    PassThrough(usize),
}

impl<S> AuthorityFix<S> {
    pub(crate) fn new(inner: S) -> Self {
        AuthorityFix {
            inner,
            input: BytesMut::new(),
            output: BytesMut::new(),
            state: State::Preface,
            rewriter: Rewriter::new(),
            eof: false,
        }
    }

    /// Moves every complete unit of `input` to `output`.
    fn process(&mut self) -> io::Result<()> {
        loop {
            match self.state {
                State::Preface => {
                    let n = self.input.len().min(PREFACE.len());
                    if self.input[..n] != PREFACE[..n] {
                        // Not HTTP/2 with prior knowledge: let h2 say so.
                        self.state = State::PassThrough(usize::MAX);
                        continue;
                    }
                    if n < PREFACE.len() {
                        return Ok(());
                    }
                    self.output.extend_from_slice(&self.input.split_to(n));
                    self.state = State::Frame;
                }
                State::PassThrough(remaining) => {
                    let n = self.input.len().min(remaining);
                    if n == 0 {
                        return Ok(());
                    }
                    self.output.extend_from_slice(&self.input.split_to(n));
                    self.state = match remaining - n {
                        0 => State::Frame,
                        left => State::PassThrough(left),
                    };
                }
                State::Frame => {
                    if self.input.len() < FRAME_HEADER_LEN {
                        return Ok(());
                    }
                    let header = FrameHeader::parse(&self.input[..FRAME_HEADER_LEN]);
                    let in_block = self.rewriter.pending.is_some();
                    if header.kind != HEADERS && header.kind != CONTINUATION {
                        if in_block {
                            return Err(protocol_error(
                                "a frame other than CONTINUATION inside a header block",
                            ));
                        }
                        self.output
                            .extend_from_slice(&self.input.split_to(FRAME_HEADER_LEN));
                        if header.len > 0 {
                            self.state = State::PassThrough(header.len);
                        }
                        continue;
                    }
                    if self.input.len() < FRAME_HEADER_LEN + header.len {
                        if header.len > MAX_HEADER_BLOCK {
                            return Err(protocol_error("header frame too large"));
                        }
                        self.input.reserve(FRAME_HEADER_LEN + header.len);
                        return Ok(());
                    }
                    self.input.advance(FRAME_HEADER_LEN);
                    let payload = self.input.split_to(header.len);
                    self.rewriter.frame(header, &payload, &mut self.output)?;
                }
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for AuthorityFix<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.output.is_empty() {
                let n = this.output.len().min(buf.remaining());
                buf.put_slice(&this.output.split_to(n));
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            if this.input.capacity() - this.input.len() < 4096 {
                this.input.reserve(8192);
            }
            let read = {
                let spare = this.input.spare_capacity_mut();
                let mut chunk = ReadBuf::uninit(spare);
                ready!(Pin::new(&mut this.inner).poll_read(cx, &mut chunk))?;
                chunk.filled().len()
            };
            if read == 0 {
                this.eof = true;
                continue;
            }
            // SAFETY: `poll_read` initialised `read` bytes of the spare capacity.
            unsafe { this.input.advance_mut(read) };
            this.process()?;
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for AuthorityFix<tokio::net::UnixStream> {
    type ConnectInfo = tonic::transport::server::UdsConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[derive(Debug, Clone, Copy)]
struct FrameHeader {
    len: usize,
    kind: u8,
    flags: u8,
    stream: u32,
}

impl FrameHeader {
    fn parse(b: &[u8]) -> Self {
        FrameHeader {
            len: usize::from(b[0]) << 16 | usize::from(b[1]) << 8 | usize::from(b[2]),
            kind: b[3],
            flags: b[4],
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff,
        }
    }

    fn write(&self, out: &mut BytesMut) {
        let len = u32::try_from(self.len).expect("frame length fits 24 bits");
        out.put_slice(&len.to_be_bytes()[1..]);
        out.put_u8(self.kind);
        out.put_u8(self.flags);
        out.put_u32(self.stream);
    }
}

/// The HPACK side: the client's decoder state, our encoder state, and the
/// header block being collected.
struct Rewriter {
    decoder: loona_hpack::Decoder<'static>,
    encoder: loona_hpack::Encoder<'static>,
    pending: Option<Pending>,
}

/// A header block whose END_HEADERS has not arrived yet.
struct Pending {
    stream: u32,
    end_stream: bool,
    /// The 5 priority bytes of the HEADERS frame, if it had them.
    priority: Option<[u8; 5]>,
    block: Vec<u8>,
}

impl Rewriter {
    fn new() -> Self {
        let mut decoder = loona_hpack::Decoder::new();
        decoder.set_max_allowed_table_size(HPACK_TABLE_SIZE);
        Rewriter {
            decoder,
            encoder: loona_hpack::Encoder::new(),
            pending: None,
        }
    }

    /// Takes one HEADERS or CONTINUATION frame; writes the rewritten block
    /// to `out` once it is complete.
    fn frame(&mut self, header: FrameHeader, payload: &[u8], out: &mut BytesMut) -> io::Result<()> {
        let fragment = match (header.kind, &mut self.pending) {
            (HEADERS, None) => {
                let (priority, fragment) = headers_payload(header.flags, payload)?;
                self.pending = Some(Pending {
                    stream: header.stream,
                    end_stream: header.flags & END_STREAM != 0,
                    priority,
                    block: Vec::new(),
                });
                fragment
            }
            (CONTINUATION, Some(p)) if p.stream == header.stream => payload,
            (HEADERS, Some(_)) => {
                return Err(protocol_error("HEADERS inside another header block"));
            }
            _ => return Err(protocol_error("CONTINUATION outside its header block")),
        };
        let pending = self.pending.as_mut().expect("set above");
        if pending.block.len() + fragment.len() > MAX_HEADER_BLOCK {
            return Err(protocol_error("header block too large"));
        }
        pending.block.extend_from_slice(fragment);
        if header.flags & END_HEADERS == 0 {
            return Ok(());
        }
        let pending = self.pending.take().expect("set above");
        let block = self.reencode(&pending.block)?;
        write_block(&pending, &block, out);
        Ok(())
    }

    fn reencode(&mut self, block: &[u8]) -> io::Result<Vec<u8>> {
        let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        self.decoder
            .decode_with_cb(block, |name: Cow<[u8]>, value: Cow<[u8]>| {
                let value = if &*name == b":authority" && !acceptable_authority(&value) {
                    Cow::Borrowed(LOCALHOST)
                } else {
                    value
                };
                fields.push((name.into_owned(), value.into_owned()));
            })
            .map_err(|e| protocol_error(&format!("cannot decode a header block: {e:?}")))?;
        Ok(self
            .encoder
            .encode(fields.iter().map(|(n, v)| (&n[..], &v[..]))))
    }
}

/// Whether h2 takes this authority as it is.
fn acceptable_authority(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

/// Splits a HEADERS payload into its priority fields and its fragment, without padding.
fn headers_payload(flags: u8, payload: &[u8]) -> io::Result<(Option<[u8; 5]>, &[u8])> {
    let mut rest = payload;
    let mut pad = 0;
    if flags & PADDED != 0 {
        let (&len, tail) = rest
            .split_first()
            .ok_or_else(|| protocol_error("padded HEADERS frame without a pad length"))?;
        pad = usize::from(len);
        rest = tail;
    }
    let mut priority = None;
    if flags & PRIORITY != 0 {
        if rest.len() < 5 {
            return Err(protocol_error("HEADERS frame too short for its priority"));
        }
        let (p, tail) = rest.split_at(5);
        priority = Some(p.try_into().expect("5 bytes"));
        rest = tail;
    }
    if pad > rest.len() {
        return Err(protocol_error("HEADERS padding longer than the frame"));
    }
    Ok((priority, &rest[..rest.len() - pad]))
}

/// Writes a HEADERS frame and as many CONTINUATION frames as `block` needs.
fn write_block(pending: &Pending, block: &[u8], out: &mut BytesMut) {
    let first_room = MAX_FRAME - pending.priority.map_or(0, |p| p.len());
    let (first, mut rest) = block.split_at(block.len().min(first_room));
    let mut flags = if pending.end_stream { END_STREAM } else { 0 };
    if pending.priority.is_some() {
        flags |= PRIORITY;
    }
    if rest.is_empty() {
        flags |= END_HEADERS;
    }
    FrameHeader {
        len: first.len() + pending.priority.map_or(0, |p| p.len()),
        kind: HEADERS,
        flags,
        stream: pending.stream,
    }
    .write(out);
    if let Some(p) = pending.priority {
        out.put_slice(&p);
    }
    out.put_slice(first);
    while !rest.is_empty() {
        let (chunk, tail) = rest.split_at(rest.len().min(MAX_FRAME));
        rest = tail;
        FrameHeader {
            len: chunk.len(),
            kind: CONTINUATION,
            flags: if rest.is_empty() { END_HEADERS } else { 0 },
            stream: pending.stream,
        }
        .write(out);
        out.put_slice(chunk);
    }
}

fn protocol_error(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("HTTP/2 from a kubelet connection: {what}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// Frames as a client would send them, built by hand so that every
    /// HPACK and framing feature can be exercised.
    struct Client {
        encoder: loona_hpack::Encoder<'static>,
        bytes: Vec<u8>,
    }

    impl Client {
        fn new() -> Self {
            Client {
                encoder: loona_hpack::Encoder::new(),
                bytes: PREFACE.to_vec(),
            }
        }

        fn frame(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
            let mut out = BytesMut::new();
            FrameHeader {
                len: payload.len(),
                kind,
                flags,
                stream,
            }
            .write(&mut out);
            out.put_slice(payload);
            self.bytes.extend_from_slice(&out);
        }

        fn settings(&mut self) {
            self.frame(0x4, 0, 0, &[]);
        }

        fn block(&mut self, fields: &[(&str, &str)]) -> Vec<u8> {
            self.encoder
                .encode(fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())))
        }

        fn request(&mut self, authority: Option<&str>) -> Vec<u8> {
            let mut fields = vec![
                (":method", "POST"),
                (":scheme", "http"),
                (":path", "/pluginregistration.Registration/GetInfo"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
                // Not in HPACK's static table: the encoder indexes it.
                ("grpc-accept-encoding", "identity,gzip"),
            ];
            if let Some(a) = authority {
                fields.insert(2, (":authority", a));
            }
            self.block(&fields)
        }
    }

    /// Runs the client's bytes through the layer into a real h2 server and
    /// returns each request's authority (None when absent) and path.
    async fn serve(bytes: Vec<u8>, requests: usize) -> Vec<(Option<String>, String)> {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        client.write_all(&bytes).await.unwrap();
        // Keep the client end open until the server has read everything.
        let mut conn = h2::server::handshake(AuthorityFix::new(server))
            .await
            .unwrap();
        let mut seen = Vec::new();
        while seen.len() < requests {
            let req = tokio::time::timeout(std::time::Duration::from_secs(10), conn.accept())
                .await
                .expect("h2 accepts each request in time")
                .expect("the connection stays open");
            let (req, _respond) = req.expect("h2 accepts the request");
            seen.push((
                req.uri().authority().map(|a| a.to_string()),
                req.uri().path().to_owned(),
            ));
        }
        drop(client);
        seen
    }

    #[tokio::test]
    async fn authorities_h2_refuses_become_localhost_and_others_stay() {
        let mut c = Client::new();
        c.settings();
        let grpc_go = c.request(Some("%2Ftmp%2Fregistry%2Fd.csi.io-reg.sock"));
        c.frame(HEADERS, END_HEADERS | END_STREAM, 1, &grpc_go);
        let raw_path = c.request(Some("/tmp/registry/d.csi.io-reg.sock"));
        c.frame(HEADERS, END_HEADERS | END_STREAM, 3, &raw_path);
        let none = c.request(None);
        c.frame(HEADERS, END_HEADERS | END_STREAM, 5, &none);
        let seen = serve(c.bytes, 3).await;
        assert_eq!(
            seen,
            vec![
                (
                    Some("localhost".into()),
                    "/pluginregistration.Registration/GetInfo".into()
                ),
                (
                    Some("localhost".into()),
                    "/pluginregistration.Registration/GetInfo".into()
                ),
                (None, "/pluginregistration.Registration/GetInfo".into()),
            ]
        );
    }

    #[tokio::test]
    async fn padding_priority_continuation_and_the_dynamic_table() {
        let mut c = Client::new();
        c.settings();
        // Stream 1: padded, with priority, split over three frames.
        let block = c.request(Some("%2Fa%2Fb.sock"));
        let (a, rest) = block.split_at(block.len() / 3);
        let (b, d) = rest.split_at(rest.len() / 2);
        let mut payload = vec![4u8]; // pad length
        payload.extend_from_slice(&[0, 0, 0, 0, 15]); // dependency 0, weight 16
        payload.extend_from_slice(a);
        payload.extend_from_slice(&[0; 4]);
        c.frame(HEADERS, PADDED | PRIORITY | END_STREAM, 1, &payload);
        c.frame(CONTINUATION, 0, 1, b);
        c.frame(CONTINUATION, END_HEADERS, 1, d);
        // Stream 3: the same fields again, which the client's encoder now
        // sends as references into its dynamic table; plus a size update
        // that evicts everything, at the start of stream 5's block.
        let again = c.request(Some("%2Fa%2Fb.sock"));
        assert!(
            again.contains(&(0x80 | 62)),
            "the second block should refer to the client's dynamic table"
        );
        c.frame(HEADERS, END_HEADERS | END_STREAM, 3, &again);
        c.encoder.set_max_table_size(0);
        let mut third = vec![0x20]; // dynamic table size update to 0
        third.extend(c.request(Some("localhost:1234")));
        c.frame(HEADERS, END_HEADERS | END_STREAM, 5, &third);
        let seen = serve(c.bytes, 3).await;
        let authorities: Vec<_> = seen.iter().map(|(a, _)| a.as_deref()).collect();
        assert_eq!(
            authorities,
            [Some("localhost"), Some("localhost"), Some("localhost:1234")]
        );
    }

    #[tokio::test]
    async fn a_block_larger_than_a_frame_is_split_into_continuations() {
        let mut c = Client::new();
        c.settings();
        let big = "x".repeat(40_000);
        let block = c.block(&[
            (":method", "POST"),
            (":scheme", "http"),
            (":authority", "%2Fa.sock"),
            (":path", "/p"),
            ("x-big", &big),
        ]);
        // The client may send up to the server's max frame size per frame.
        for (i, chunk) in block.chunks(MAX_FRAME).enumerate() {
            let last = (i + 1) * MAX_FRAME >= block.len();
            let kind = if i == 0 { HEADERS } else { CONTINUATION };
            let flags = if last { END_HEADERS } else { 0 } | if i == 0 { END_STREAM } else { 0 };
            c.frame(kind, flags, 1, chunk);
        }
        let seen = serve(c.bytes, 1).await;
        assert_eq!(seen, vec![(Some("localhost".into()), "/p".into())]);
    }

    #[test]
    fn frames_out_of_order_and_bad_padding_are_errors() {
        let mut fix = AuthorityFix::new(tokio::io::empty());
        fix.input.extend_from_slice(PREFACE);
        let mut c = Client::new();
        let block = c.request(Some("a"));
        c.bytes.clear();
        c.frame(HEADERS, END_STREAM, 1, &block); // no END_HEADERS
        c.frame(0x0, 0, 1, b"data"); // DATA inside the block
        fix.input.extend_from_slice(&c.bytes);
        let err = fix.process().unwrap_err().to_string();
        assert!(err.contains("other than CONTINUATION"), "{err}");

        let mut fix = AuthorityFix::new(tokio::io::empty());
        fix.input.extend_from_slice(PREFACE);
        c.bytes.clear();
        c.frame(HEADERS, PADDED | END_HEADERS, 1, &[200, 1, 2]);
        fix.input.extend_from_slice(&c.bytes);
        let err = fix.process().unwrap_err().to_string();
        assert!(err.contains("padding longer than the frame"), "{err}");
    }

    #[test]
    fn other_frames_pass_through_byte_for_byte_even_when_split() {
        let mut c = Client::new();
        c.settings();
        c.frame(0x0, 0x1, 1, &[7u8; 100]); // DATA
        c.frame(0x6, 0, 0, &[1, 2, 3, 4, 5, 6, 7, 8]); // PING
        let mut fix = AuthorityFix::new(tokio::io::empty());
        for chunk in c.bytes.chunks(7) {
            fix.input.extend_from_slice(chunk);
            fix.process().unwrap();
        }
        assert_eq!(&fix.output[..], &c.bytes[..]);
    }
}
