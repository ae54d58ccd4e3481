//! A backend's answer decoded from its `Content-Encoding` before it is merged: tollgate
//! asks for gzip (RFC 9110 §8.4.1.3), and some backends send it (or deflate) whatever they
//! are asked. The decoded size is capped like the answer itself.

use bytes::Bytes;
use http::HeaderValue;
use std::io::Read;

/// The answer's bytes decoded, at most `max` of them; `Err` says why it cannot be read.
pub fn decoded(encoding: &Option<HeaderValue>, body: Bytes, max: usize) -> Result<Bytes, String> {
    let Some(enc) = encoding.as_ref().and_then(|v| v.to_str().ok()) else {
        return Ok(body);
    };
    let enc = enc.trim().to_ascii_lowercase();
    let mut out = Vec::new();
    let limit = max as u64 + 1;
    let r = match enc.as_str() {
        "" | "identity" => return Ok(body),
        "gzip" | "x-gzip" => flate2::read::MultiGzDecoder::new(&body[..])
            .take(limit)
            .read_to_end(&mut out),
        // RFC 9110 §8.4.1.2: zlib-wrapped; some servers send it raw.
        "deflate" => flate2::read::ZlibDecoder::new(&body[..])
            .take(limit)
            .read_to_end(&mut out)
            .or_else(|_| {
                out.clear();
                flate2::read::DeflateDecoder::new(&body[..])
                    .take(limit)
                    .read_to_end(&mut out)
            }),
        other => {
            return Err(format!(
                "the answer is encoded `{other}`, which tollgate did not ask for and cannot decode"
            ));
        }
    };
    r.map_err(|e| format!("the {enc} answer cannot be decoded: {e}"))?;
    if out.len() > max {
        return Err(format!(
            "the answer, decoded, is larger than max_body_bytes ({max} bytes)"
        ));
    }
    Ok(Bytes::from(out))
}
