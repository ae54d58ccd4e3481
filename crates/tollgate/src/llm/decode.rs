//! A compressed answer read for usage: the provider's bytes go on to the client as they
//! came, and a copy is decoded as it passes (RFC 9110 §8.4.1: `gzip`, `deflate` — zlib,
//! or the raw deflate some servers send —, `br`, `zstd`) straight into the usage reader,
//! a piece at a time. Memory stays the decoders' own windows (zstd's capped at 8 MiB,
//! RFC 9659 §3); what is decoded is capped ([`MAX_DECODED`]), so a decompression bomb
//! costs a bounded amount of work and leaves the call charged its estimate.

use std::io::Write;

/// The most bytes decoded from one answer: far more than any answer's usage needs to be
/// reached (a batch of embeddings is tens of MB), far less than a bomb would make.
pub const MAX_DECODED: u64 = 256 << 20;

/// The largest zstd window accepted: what HTTP's `zstd` content coding allows.
const ZSTD_WINDOW: u64 = 8 << 20;

/// What decoded bytes are given to.
pub trait Feed {
    fn feed(&mut self, data: &[u8]);
}

/// Passes decoded bytes to the reader, counting them; past the cap it refuses them, which
/// stops the decoder.
struct Sink<F> {
    reader: F,
    decoded: u64,
}

impl<F: Feed> Write for Sink<F> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.decoded += buf.len() as u64;
        if self.decoded > MAX_DECODED {
            return Err(std::io::Error::other("decoded past the cap"));
        }
        self.reader.feed(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

enum Coder<F: Feed> {
    Gzip(flate2::write::MultiGzDecoder<Sink<F>>),
    Zlib(flate2::write::ZlibDecoder<Sink<F>>),
    RawDeflate(flate2::write::DeflateDecoder<Sink<F>>),
    /// `deflate` before its first two bytes tell zlib from raw deflate.
    Deflate(Option<Sink<F>>, Vec<u8>),
    Br(Box<brotli_decompressor::DecompressorWriter<Sink<F>>>),
    Zstd(Box<Zstd<F>>),
    /// Stopped: a corrupt stream, or past the cap.
    Failed,
}

/// The decoder of one answer.
pub struct Decoder<F: Feed> {
    coder: Coder<F>,
    /// [`Decoder::finish`] ran (once: a finished decoder may refuse to finish again).
    finished: bool,
}

impl<F: Feed> Decoder<F> {
    /// A decoder for `content_encoding` feeding `reader`; `Err(reader)` for a coding it
    /// does not know (or several stacked).
    pub fn new(content_encoding: &str, reader: F) -> Result<Self, F> {
        let sink = Sink { reader, decoded: 0 };
        let coder = match content_encoding.trim().to_ascii_lowercase().as_str() {
            "gzip" | "x-gzip" => Coder::Gzip(flate2::write::MultiGzDecoder::new(sink)),
            "deflate" => Coder::Deflate(Some(sink), Vec::new()),
            "br" => Coder::Br(Box::new(brotli_decompressor::DecompressorWriter::new(
                sink, 4096,
            ))),
            "zstd" => Coder::Zstd(Box::new(Zstd {
                frame: None,
                checksum: false,
                last: false,
                pending: Vec::new(),
                sink,
            })),
            _ => return Err(sink.reader),
        };
        Ok(Self {
            coder,
            finished: false,
        })
    }

    /// Whether decoding stopped (a corrupt stream, or more than [`MAX_DECODED`]).
    pub fn failed(&self) -> bool {
        matches!(self.coder, Coder::Failed)
    }

    /// Decodes what the decoder still holds once the answer has ended: a write decoder
    /// keeps its last output until its next write, so the last piece (a one-piece
    /// answer's all) reaches the reader only here.
    pub fn finish(&mut self) {
        if std::mem::replace(&mut self.finished, true) {
            return;
        }
        let ok = match &mut self.coder {
            Coder::Gzip(d) => d.try_finish().is_ok(),
            Coder::Zlib(d) => d.try_finish().is_ok(),
            Coder::RawDeflate(d) => d.try_finish().is_ok(),
            Coder::Br(d) => d.close().is_ok(),
            // zstd decodes each block whole as it arrives; a `deflate` answer of less
            // than two bytes has nothing to decode.
            Coder::Zstd(_) | Coder::Deflate(..) | Coder::Failed => true,
        };
        if !ok {
            self.coder = Coder::Failed;
        }
    }

    /// Decodes the next piece of the answer into the reader.
    pub fn feed(&mut self, data: &[u8]) {
        let ok = match &mut self.coder {
            Coder::Gzip(d) => d.write_all(data).is_ok(),
            Coder::Zlib(d) => d.write_all(data).is_ok(),
            Coder::RawDeflate(d) => d.write_all(data).is_ok(),
            Coder::Br(d) => d.write_all(data).is_ok(),
            Coder::Zstd(z) => z.feed(data),
            Coder::Deflate(sink, head) => {
                head.extend_from_slice(data);
                if head.len() < 2 {
                    return;
                }
                // RFC 1950 §2.2: a zlib header has compression method 8 and a check
                // making the first two bytes a multiple of 31.
                let zlib = head[0] & 0x0f == 8 && u16::from_be_bytes([head[0], head[1]]) % 31 == 0;
                let head = std::mem::take(head);
                let sink = sink.take().expect("set until the coding is known");
                self.coder = if zlib {
                    Coder::Zlib(flate2::write::ZlibDecoder::new(sink))
                } else {
                    Coder::RawDeflate(flate2::write::DeflateDecoder::new(sink))
                };
                return self.feed(&head);
            }
            Coder::Failed => true,
        };
        if !ok {
            self.coder = Coder::Failed;
        }
    }
}

/// zstd (RFC 8878) through `ruzstd`'s frame decoder, given one whole block at a time (a
/// block is at most 128 KiB and decodes to at most 128 KiB), so no call decodes more
/// than a block before the cap is checked: bytes wait in `pending` until their block is
/// complete.
struct Zstd<F> {
    frame: Option<ruzstd::decoding::FrameDecoder>,
    /// The frame ends with a 4-byte checksum.
    checksum: bool,
    /// The frame's last block is decoded; its checksum is awaited.
    last: bool,
    pending: Vec<u8>,
    sink: Sink<F>,
}

impl<F: Feed> Zstd<F> {
    fn feed(&mut self, data: &[u8]) -> bool {
        self.pending.extend_from_slice(data);
        loop {
            let Some(frame) = &mut self.frame else {
                let mut f = ruzstd::decoding::FrameDecoder::new();
                f.set_max_window_size(ZSTD_WINDOW);
                let mut src = &self.pending[..];
                match f.init(&mut src) {
                    Ok(()) => {
                        // §3.1.1.1.1: the descriptor's bit 2 is Content_Checksum_Flag.
                        self.checksum = self.pending[4] & 0b100 != 0;
                        let used = self.pending.len() - src.len();
                        self.pending.drain(..used);
                        self.frame = Some(f);
                        continue;
                    }
                    // A frame header is at most 18 bytes (§3.1.1.1).
                    Err(_) if self.pending.len() < 18 => return true,
                    Err(_) => return false,
                }
            };
            // What this step takes: the checksum, or the next whole block; and whether
            // a checksum is awaited after it.
            let (used, last) = if self.last {
                (4, false)
            } else {
                // §3.1.1.2: Last_Block (1 bit), Block_Type (2), Block_Size (21).
                let Some(h) = self.pending.get(..3) else {
                    return true;
                };
                let h = u32::from_le_bytes([h[0], h[1], h[2], 0]);
                let body = match (h >> 1) & 3 {
                    1 => 1,
                    3 => return false,
                    _ => (h >> 3) as usize,
                };
                (3 + body, h & 1 == 1 && self.checksum)
            };
            if self.pending.len() < used {
                return true;
            }
            if frame
                .decode_from_to(&self.pending[..used], &mut [])
                .is_err()
                || frame.collect_to_writer(&mut self.sink).is_err()
            {
                return false;
            }
            self.last = last;
            self.pending.drain(..used);
            if frame.is_finished() {
                // The next frame, if the answer holds another.
                self.frame = None;
                self.last = false;
                if self.pending.is_empty() {
                    return true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default, Clone)]
    struct Collect(std::rc::Rc<std::cell::RefCell<Vec<u8>>>);

    impl Feed for Collect {
        fn feed(&mut self, data: &[u8]) {
            self.0.borrow_mut().extend_from_slice(data);
        }
    }

    /// What the reader got once the decoder was told the answer ended (before it is
    /// dropped: the answer's end is where its usage is read).
    fn decoded(coding: &str, body: &[u8], piece: usize) -> (Vec<u8>, bool) {
        let got = Collect::default();
        let mut d = Decoder::new(coding, got.clone())
            .ok()
            .expect("known coding");
        for c in body.chunks(piece) {
            d.feed(c);
        }
        d.finish();
        // Told twice (at the body's length, then at its end): the second does nothing.
        d.finish();
        let out = got.0.borrow().clone();
        (out, d.failed())
    }

    fn text() -> Vec<u8> {
        let mut t = Vec::new();
        for i in 0..4000 {
            t.extend_from_slice(
                format!("data: {{\"i\":{i},\"content\":\"hello\"}}\n\n").as_bytes(),
            );
        }
        t
    }

    #[test]
    fn each_coding_decodes_whatever_the_pieces() {
        let t = text();
        let gz = {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(&t).unwrap();
            e.finish().unwrap()
        };
        let zlib = {
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(&t).unwrap();
            e.finish().unwrap()
        };
        let raw = {
            let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(&t).unwrap();
            e.finish().unwrap()
        };
        let br = {
            let mut out = Vec::new();
            let mut e = brotli_encoder(&mut out);
            e.write_all(&t).unwrap();
            drop(e);
            out
        };
        let zstd =
            ruzstd::encoding::compress_to_vec(&t[..], ruzstd::encoding::CompressionLevel::Fastest);
        for (coding, body) in [
            ("gzip", &gz),
            ("deflate", &zlib),
            ("deflate", &raw),
            ("br", &br),
            ("zstd", &zstd),
        ] {
            for piece in [1, 13, 4096, 1 << 20] {
                let (got, failed) = decoded(coding, body, piece);
                assert!(!failed, "{coding} in pieces of {piece}");
                assert!(
                    got == t,
                    "{coding} in pieces of {piece}: {} bytes",
                    got.len()
                );
            }
        }
    }

    fn brotli_encoder(out: &mut Vec<u8>) -> impl Write + '_ {
        // No brotli encoder is a dependency: a stored (uncompressed) meta-block stream,
        // RFC 7932 §9.2, is a valid brotli stream every decoder reads.
        struct Stored<'a>(&'a mut Vec<u8>, Vec<u8>);
        impl Write for Stored<'_> {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.1.extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        impl Drop for Stored<'_> {
            fn drop(&mut self) {
                *self.0 = brotli_stored(&self.1);
            }
        }
        Stored(out, Vec::new())
    }

    /// Brotli's stored form: WBITS 16, then uncompressed meta-blocks of up to 64 KiB,
    /// then an empty last meta-block.
    fn brotli_stored(data: &[u8]) -> Vec<u8> {
        let mut bits = Bits::default();
        bits.put(0, 1); // WBITS = 16
        for chunk in data.chunks(1 << 16) {
            bits.put(0, 1); // ISLAST = 0
            bits.put(0, 2); // MNIBBLES = 4
            bits.put((chunk.len() - 1) as u64, 16); // MLEN - 1
            bits.put(1, 1); // ISUNCOMPRESSED
            bits.align();
            bits.out.extend_from_slice(chunk);
        }
        bits.put(1, 1); // ISLAST
        bits.put(1, 1); // ISLASTEMPTY
        bits.align();
        bits.out
    }

    #[derive(Default)]
    struct Bits {
        out: Vec<u8>,
        acc: u64,
        n: u32,
    }

    impl Bits {
        fn put(&mut self, v: u64, n: u32) {
            self.acc |= v << self.n;
            self.n += n;
            while self.n >= 8 {
                self.out.push(self.acc as u8);
                self.acc >>= 8;
                self.n -= 8;
            }
        }
        fn align(&mut self) {
            if self.n > 0 {
                self.out.push(self.acc as u8);
                self.acc = 0;
                self.n = 0;
            }
        }
    }

    #[test]
    fn a_bomb_stops_at_the_cap() {
        // 300 MiB of zeros, gzipped to about 300 KiB.
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..300 {
            e.write_all(&zeros).unwrap();
        }
        let gz = e.finish().unwrap();
        let mut n = Count(0);
        let mut d = Decoder::new("gzip", &mut n).ok().unwrap();
        for c in gz.chunks(16 << 10) {
            d.feed(c);
        }
        assert!(d.failed());
        drop(d);
        assert!(n.0 <= MAX_DECODED, "{} bytes decoded", n.0);
    }

    struct Count(u64);

    impl Feed for &mut Count {
        fn feed(&mut self, data: &[u8]) {
            self.0 += data.len() as u64;
        }
    }

    #[test]
    fn unknown_and_corrupt_codings_are_told() {
        assert!(Decoder::new("compress", Collect::default()).is_err());
        assert!(Decoder::new("gzip, br", Collect::default()).is_err());
        let (_, failed) = decoded("gzip", b"not gzip at all", 4);
        assert!(failed);
    }
}
