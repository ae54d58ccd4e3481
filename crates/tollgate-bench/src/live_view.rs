//! A reader of tollgate's dashboard live view (`GET /ui/api/live`), as a browser keeps
//! it open: it reads every event as it comes and counts the calls, for
//! `bench capacity --dashboard` (the cost of a dashboard open and streaming).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// An open live view; closed when dropped.
pub struct LiveView {
    stream: TcpStream,
    calls: Arc<AtomicU64>,
    reader: Option<std::thread::JoinHandle<()>>,
}

const CALL: &[u8] = b"event: call\n";

impl LiveView {
    /// Opens the live view of the gateway whose admin listener is `admin`.
    pub fn open(admin: SocketAddr) -> Result<Self, String> {
        let mut stream = TcpStream::connect(admin).map_err(|e| format!("live view: {e}"))?;
        write!(stream, "GET /ui/api/live HTTP/1.1\r\nhost: {admin}\r\n\r\n")
            .map_err(|e| format!("live view: {e}"))?;
        let calls = Arc::new(AtomicU64::new(0));
        let (mut r, counted) = (
            stream.try_clone().map_err(|e| e.to_string())?,
            calls.clone(),
        );
        let reader = std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 << 10];
            // Bytes of a marker cut at the end of the last read.
            let mut carry: Vec<u8> = Vec::new();
            while let Ok(n) = r.read(&mut buf) {
                if n == 0 {
                    break;
                }
                carry.extend_from_slice(&buf[..n]);
                let found = carry.windows(CALL.len()).filter(|w| *w == CALL).count();
                counted.fetch_add(found as u64, Ordering::Relaxed);
                let keep = carry.len().min(CALL.len() - 1);
                carry.drain(..carry.len() - keep);
            }
        });
        Ok(Self {
            stream,
            calls,
            reader: Some(reader),
        })
    }

    /// Calls received so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

impl Drop for LiveView {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Both);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}
