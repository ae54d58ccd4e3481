//! A cached stream replayed as it came (`replay: paced`): while an answer is stored, the
//! end of each frame and when it arrived (after the head) are noted; a hit sends the same
//! frames, each when it came the first time, so an SSE answer reaches a later caller with
//! the provider's framing and rhythm (a chat UI types it out as it did). Without pacing a
//! hit sends the body at once, in one frame: the same bytes and events.

use crate::body::BoxError;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// Where a frame of the stored body ended, and when it had arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    /// The frame's end, as an offset into the body.
    pub end: u32,
    /// Milliseconds after the answer's head.
    pub at_ms: u32,
}

/// The most marks an entry keeps: past them, later frames join the last one (which takes
/// the time of the latest), so a stream of many small frames costs a bounded list.
pub const MAX_MARKS: usize = 4096;

/// A stored body's marks.
#[derive(Debug, PartialEq, Eq)]
pub struct Pace(pub Box<[Mark]>);

/// The marks of a body being stored.
pub struct Marks {
    start: Instant,
    marks: Vec<Mark>,
}

impl Marks {
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
            marks: Vec::new(),
        }
    }

    /// A frame passed; the body stored so far is `len` bytes.
    pub fn frame(&mut self, len: usize) {
        let at_ms = self.start.elapsed().as_millis().min(u32::MAX as u128) as u32;
        let mark = Mark {
            end: len.min(u32::MAX as usize) as u32,
            at_ms,
        };
        let full = self.marks.len() >= MAX_MARKS;
        match self.marks.last_mut() {
            Some(last) if full => *last = mark,
            _ => self.marks.push(mark),
        }
    }

    pub fn done(self) -> Pace {
        Pace(self.marks.into())
    }
}

/// A stored body sent frame by frame at the times its marks say, from now.
pub struct Paced {
    body: Bytes,
    marks: Arc<Pace>,
    /// The next mark to send.
    next: usize,
    /// Where the next frame starts in the body.
    from: usize,
    start: Instant,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Paced {
    pub fn new(body: Bytes, marks: Arc<Pace>) -> Self {
        Self {
            body,
            marks,
            next: 0,
            from: 0,
            start: Instant::now(),
            sleep: None,
        }
    }
}

impl http_body::Body for Paced {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let len = this.body.len();
        let Some(mark) = this.marks.0.get(this.next).copied() else {
            // Past the marks (a body longer than they say): the rest at once.
            return Poll::Ready((this.from < len).then(|| {
                let rest = this.body.slice(this.from..);
                this.from = len;
                Ok(Frame::data(rest))
            }));
        };
        let due = this.start + Duration::from_millis(u64::from(mark.at_ms));
        if Instant::now() < due {
            let sleep = this
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        this.sleep = None;
        this.next += 1;
        // Marks come from the body they were taken of; a list that does not fit it (a
        // foreign record) ends where the body does.
        let end = (mark.end as usize).clamp(this.from, len);
        let frame = this.body.slice(this.from..end);
        this.from = end;
        Poll::Ready(Some(Ok(Frame::data(frame))))
    }

    fn is_end_stream(&self) -> bool {
        self.from >= self.body.len() && self.next >= self.marks.0.len()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact((self.body.len() - self.from) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn pace(marks: Vec<Mark>) -> Arc<Pace> {
        Arc::new(Pace(marks.into()))
    }

    #[tokio::test(start_paused = true)]
    async fn a_paced_replay_sends_each_frame_when_it_first_came() {
        let marks = pace(vec![
            Mark { end: 3, at_ms: 0 },
            Mark { end: 6, at_ms: 100 },
            Mark { end: 9, at_ms: 250 },
        ]);
        let start = Instant::now();
        let mut body = Paced::new(Bytes::from_static(b"abcdefghi"), marks);
        let mut got = Vec::new();
        while let Some(f) = body.frame().await {
            let d = f.unwrap().into_data().unwrap();
            got.push((d, start.elapsed().as_millis()));
        }
        assert_eq!(
            got,
            vec![
                (Bytes::from_static(b"abc"), 0),
                (Bytes::from_static(b"def"), 100),
                (Bytes::from_static(b"ghi"), 250),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn marks_that_do_not_fit_the_body_still_send_it_whole_once() {
        for marks in [
            vec![],
            vec![Mark { end: 2, at_ms: 0 }],
            vec![Mark { end: 50, at_ms: 10 }, Mark { end: 1, at_ms: 20 }],
        ] {
            let body = Paced::new(Bytes::from_static(b"abcdef"), pace(marks));
            let all = body.collect().await.unwrap().to_bytes();
            assert_eq!(all, Bytes::from_static(b"abcdef"));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn marks_past_the_cap_join_the_last_one() {
        let mut m = Marks::new();
        for i in 1..=MAX_MARKS + 10 {
            tokio::time::advance(Duration::from_millis(1)).await;
            m.frame(i);
        }
        let marks = m.done().0;
        assert_eq!(marks.len(), MAX_MARKS);
        let last = marks[MAX_MARKS - 1];
        assert_eq!(last.end as usize, MAX_MARKS + 10);
        assert_eq!(last.at_ms as usize, MAX_MARKS + 10);
    }
}
