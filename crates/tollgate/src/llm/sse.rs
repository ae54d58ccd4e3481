//! Server-sent events as they pass: lines split across pieces are joined, and each event
//! (its `event:` name and its `data:`, lines joined by `\n`) is handed on when the blank
//! line ending it arrives, with where it ends in the stream (WHATWG HTML §9.2.6, the
//! `text/event-stream` interpretation; lines end in `\n` or `\r\n`). A `data:` line
//! longer than the cap is not kept: it is watched as it passes by a [`Scan`] for the few
//! values wanted of it (a Responses `response.completed` that echoes a long prompt still
//! tells its usage).

use super::scan::Scan;

/// One event.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Event {
    pub name: Vec<u8>,
    pub data: Vec<u8>,
    /// Where the event (its blank line included) ends, in bytes from the stream's start.
    pub end: u64,
    /// A line of it was longer than the cap and not kept (`data` lacks it).
    pub long: bool,
    /// What the scan of a long `data:` line found: the wanted key's index, its value.
    pub found: Vec<(usize, Vec<u8>)>,
}

/// Which values to look for in a long `data:` line of an event named so (`None`: none).
pub type Scanner = Box<dyn Fn(&[u8]) -> Option<Scan> + Send>;

/// The splitter. A line or an event's data longer than the cap is dropped (the event is
/// still handed on, its data empty and `long` set), so a hostile stream cannot grow it.
pub struct Events {
    line: Vec<u8>,
    line_long: bool,
    /// The scan of the long `data:` line being read.
    scan: Option<Scan>,
    scanner: Option<Scanner>,
    event: Event,
    /// Bytes fed so far.
    offset: u64,
    cap: usize,
}

impl Events {
    pub fn new(cap: usize) -> Self {
        Self {
            line: Vec::new(),
            line_long: false,
            scan: None,
            scanner: None,
            event: Event::default(),
            offset: 0,
            cap,
        }
    }

    /// Long `data:` lines are scanned for what `scanner` says of their event.
    pub fn scanning(mut self, scanner: Scanner) -> Self {
        self.scanner = Some(scanner);
        self
    }

    /// Bytes fed so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Feeds the next piece; `each` gets every event it completes (its buffers are the
    /// splitter's, used again for the next event).
    pub fn feed(&mut self, data: &[u8], mut each: impl FnMut(&Event)) {
        let mut rest = data;
        while !rest.is_empty() {
            let Some(nl) = memchr::memchr(b'\n', rest) else {
                self.keep(rest);
                self.offset += rest.len() as u64;
                return;
            };
            self.offset += nl as u64 + 1;
            let whole = &rest[..nl];
            rest = &rest[nl + 1..];
            // A line wholly in this piece (the common case) is read where it lies.
            if self.line.is_empty() && !self.line_long && self.scan.is_none() && nl <= self.cap {
                self.line_ended(whole.strip_suffix(b"\r").unwrap_or(whole), false, &mut each);
                continue;
            }
            self.keep(whole);
            let mut line = std::mem::take(&mut self.line);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let long = std::mem::take(&mut self.line_long);
            if let Some(scan) = self.scan.take() {
                self.event.found.extend(scan.found);
            }
            self.line_ended(&line, long, &mut each);
            line.clear();
            self.line = line;
        }
    }

    /// A line (without its end) that was `long` and not kept: a blank one ends the event.
    fn line_ended(&mut self, line: &[u8], long: bool, each: &mut impl FnMut(&Event)) {
        self.event.long |= long;
        if line.is_empty() && !long {
            self.event.end = self.offset;
            each(&self.event);
            let e = &mut self.event;
            e.name.clear();
            e.data.clear();
            e.found.clear();
            e.long = false;
        } else if !long {
            self.field(line);
        }
    }

    fn keep(&mut self, part: &[u8]) {
        if let Some(scan) = &mut self.scan {
            scan.feed(part);
            return;
        }
        if self.line_long {
            // Past the cap with nothing to scan for: dropped as it comes.
            return;
        }
        if self.line.len() + part.len() > self.cap {
            self.line_long = true;
            // The field's name, joined from this piece when the line starts in it.
            let take = 5usize.saturating_sub(self.line.len()).min(part.len());
            self.line.extend_from_slice(&part[..take]);
            let rest = &part[take..];
            let scan = self.line.strip_prefix(b"data:").and_then(|value| {
                let mut scan = (self.scanner.as_ref()?)(&self.event.name)?;
                scan.feed(value);
                scan.feed(rest);
                Some(scan)
            });
            self.scan = scan;
            self.line.clear();
        } else {
            self.line.extend_from_slice(part);
        }
    }

    fn field(&mut self, line: &[u8]) {
        let (name, value) = match memchr::memchr(b':', line) {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match name {
            b"data" if self.event.data.len() + value.len() < self.cap => {
                if !self.event.data.is_empty() {
                    self.event.data.push(b'\n');
                }
                self.event.data.extend_from_slice(value);
            }
            b"data" => self.event.long = true,
            b"event" => {
                self.event.name.clear();
                self.event.name.extend_from_slice(value);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_whole_whatever_the_pieces() {
        let stream = b"event: message_start\r\ndata: {\"a\":1}\r\n\r\n: comment\n\ndata: x\ndata: y\n\ndata: [DONE]\n\n";
        for piece in [1, 2, 5, 100] {
            let mut got = Vec::new();
            let mut ev = Events::new(1024);
            for c in stream.chunks(piece) {
                ev.feed(c, |e| got.push(e.clone()));
            }
            let names: Vec<_> = got.iter().map(|e| e.name.clone()).collect();
            let data: Vec<_> = got.iter().map(|e| e.data.clone()).collect();
            assert_eq!(names[0], b"message_start");
            assert_eq!(
                data,
                vec![
                    b"{\"a\":1}".to_vec(),
                    b"".to_vec(),
                    b"x\ny".to_vec(),
                    b"[DONE]".to_vec()
                ]
            );
            assert_eq!(got[0].end, 39);
            assert_eq!(got[3].end, stream.len() as u64);
        }
    }

    #[test]
    fn a_long_data_line_is_scanned_for_what_its_event_needs() {
        let usage = r#"{"input_tokens":320050,"output_tokens":20000}"#;
        let event = format!(
            "event: response.completed\ndata: {{\"type\":\"response.completed\",\"response\":{{\"instructions\":\"{}\",\"usage\":{usage}}}}}\n\n",
            "x".repeat(5000)
        );
        for piece in [1, 7, 100, 10_000] {
            let mut ev = Events::new(64).scanning(Box::new(|name| {
                (name == b"response.completed").then(|| Scan::nested(&["usage", "model"], 1024))
            }));
            let mut got = Vec::new();
            for c in event.as_bytes().chunks(piece) {
                ev.feed(c, |e| got.push(e.clone()));
            }
            assert_eq!(got.len(), 1);
            assert!(got[0].long && got[0].data.is_empty());
            let found: Vec<_> = got[0]
                .found
                .iter()
                .map(|(k, v)| (*k, String::from_utf8_lossy(v).trim().to_owned()))
                .collect();
            assert_eq!(found, vec![(0, usage.to_owned())], "pieces of {piece}");
            assert!(ev.line.capacity() <= 64 * 2, "the long line was not kept");
        }
    }

    #[test]
    fn a_long_line_is_dropped_not_kept() {
        let mut ev = Events::new(16);
        let mut got = Vec::new();
        ev.feed(
            b"data: 0123456789012345678901234567890\n\ndata: ok\n\n",
            |e| got.push(e.data.clone()),
        );
        assert_eq!(got, vec![b"".to_vec(), b"ok".to_vec()]);
    }
}
