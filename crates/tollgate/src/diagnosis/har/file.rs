//! The file sink: HAR files in a directory, rotated by size and age, the oldest deleted
//! past the retention count.
//!
//! A file a reader finds under the `.har` name is a complete HAR 1.2 document and never
//! changes again. Entries go to the file being written, `….har.partial`: a document whose
//! closing `]}}` each append overwrites and writes again after the new entries (so a viewer
//! can open it, though a read racing a write may see it cut). It is renamed to `.har`
//! (atomic, RFC-less but POSIX `rename(2)`) when it is closed: past `max_bytes` or
//! `max_age`, at shutdown, or — left by a crash — at the next start, cut back first to its
//! last complete entry. Entries are appended as calls complete; a closed file is put in
//! start order (HAR viewers show entries as a timeline). A write that fails (a full disk) is undone: the file is cut back
//! to the entries it held before, so what follows starts clean; if even that fails the
//! file is left for the repair a later rotation runs. A closed file is published, and
//! the oldest deleted, on a thread of their own ([`super::publish`]): a rotation costs
//! the writer the next file's creation only.

use super::publish::{Closed, Publisher};
use crate::diagnosis::settings::HarFile;
use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

const CLOSE: &str = "\n]}}\n";
const PREFIX: &str = "tollgate-";
const SUFFIX: &str = ".har";
/// The file being written: not a `.har` until it is complete for good.
const LIVE: &str = ".har.partial";
/// A closed file being rewritten in start order (the extension replacing `partial`).
const SORTING: &str = "sorting";

pub struct FileSink {
    settings: HarFile,
    current: Option<Current>,
    seq: u64,
    /// Files a failed write could not restore, repaired at the next rotation (once space
    /// may be back).
    abandoned: Vec<PathBuf>,
    /// Publishes closed files (dropped after the file being written is closed: stopping
    /// publishes it too).
    publisher: Publisher,
}

struct Current {
    file: File,
    path: PathBuf,
    /// Bytes of the complete document on disk (closing `]}}` included).
    size: u64,
    entries: u64,
    opened: Instant,
}

struct WriteError {
    error: std::io::Error,
    /// The file was cut back to what it held before.
    undone: bool,
}

/// An append that did not write everything.
#[derive(Debug)]
pub struct AppendError {
    /// Entries written before the failure.
    pub written: usize,
    pub error: std::io::Error,
}

impl FileSink {
    /// Opens the directory, closing what a crash left being written.
    pub fn new(settings: HarFile) -> std::io::Result<Self> {
        ensure_dir(&settings.dir)?;
        repair_all(&settings.dir);
        keep_newest(&settings.dir, settings.retain);
        let (dir, retain) = (settings.dir.clone(), settings.retain);
        let publisher = Publisher::start(Box::new(move |c| publish_closed(c, &dir, retain)));
        Ok(Self::publishing_with(settings, publisher))
    }

    /// A sink whose closed files go to `publisher`.
    fn publishing_with(settings: HarFile, publisher: Publisher) -> Self {
        Self {
            settings,
            current: None,
            seq: 0,
            abandoned: Vec::new(),
            publisher,
        }
    }

    /// Appends entries (each a serialized JSON object on one line), closing the file and
    /// starting another whenever it reaches `max_bytes` or `max_age`: a file passes
    /// `max_bytes` by at most one entry.
    pub fn append(&mut self, entries: &[String]) -> Result<(), AppendError> {
        let mut written = 0;
        // Sized once: grown by doubling, a batch of entries was copied twice more.
        let mut chunk = String::with_capacity(
            entries
                .iter()
                .map(|e| e.len() + 2)
                .sum::<usize>()
                .min(self.settings.max_bytes),
        );
        while written < entries.len() {
            let fail = |error| AppendError { written, error };
            if self.current.as_ref().is_none_or(|c| self.due(c)) {
                self.rotate().map_err(fail)?;
            }
            let c = self.current.as_mut().expect("opened by rotate");
            let room = (self.settings.max_bytes as u64).saturating_sub(c.size);
            chunk.clear();
            let mut n = 0;
            for e in &entries[written..] {
                if n > 0 && (chunk.len() + e.len() + 2) as u64 > room {
                    break;
                }
                chunk.push_str(if c.entries + n == 0 { "\n" } else { ",\n" });
                chunk.push_str(e);
                n += 1;
            }
            if let Err(e) = c.write(&chunk) {
                if e.undone {
                    // Cut back: the file is whole and takes the next batch.
                } else if let Some(c) = self.current.take() {
                    self.abandoned.push(c.path);
                }
                return Err(fail(e.error));
            }
            c.entries += n;
            written += n as usize;
        }
        Ok(())
    }

    fn due(&self, c: &Current) -> bool {
        c.size >= self.settings.max_bytes as u64 || c.opened.elapsed() >= self.settings.max_age
    }

    /// Closes a file that is past its age even when no entry comes.
    pub fn tick(&mut self) {
        if self
            .current
            .as_ref()
            .is_some_and(|c| c.opened.elapsed() >= self.settings.max_age)
        {
            self.close();
        }
    }

    /// Hands the file being written to be published under its `.har` name.
    fn close(&mut self) {
        if let Some(c) = self.current.take() {
            self.publisher.hand(Closed {
                file: c.file,
                path: c.path,
            });
        }
    }

    /// Opens the next file, then hands the one before it to the publisher: the publisher's
    /// retention then always counts the file being written (handed first, it could count
    /// the files before the next one existed, and keep one too many).
    fn rotate(&mut self) -> std::io::Result<()> {
        self.abandoned.retain(|p| {
            repair(p)
                .inspect_err(|e| tracing::warn!("HAR file {}: not repaired yet: {e}", p.display()))
                .is_err()
        });
        self.seq += 1;
        let stamp = jiff::Timestamp::now().strftime("%Y%m%dT%H%M%S%.3fZ");
        let path = self
            .settings
            .dir
            .join(format!("{PREFIX}{stamp}-{:06}{LIVE}", self.seq));
        let mut file = match File::create(&path) {
            Ok(f) => f,
            Err(e) => {
                self.close();
                return Err(e);
            }
        };
        let head = head();
        let opened = file
            .write_all(head.as_bytes())
            .and_then(|_| file.write_all(CLOSE.as_bytes()));
        if let Err(e) = opened {
            let _ = std::fs::remove_file(&path);
            self.close();
            return Err(e);
        }
        self.close();
        self.current = Some(Current {
            file,
            path,
            size: (head.len() + CLOSE.len()) as u64,
            entries: 0,
            opened: Instant::now(),
        });
        Ok(())
    }
}

/// On the publishing thread: flushes a closed file to disk, publishes it, and deletes
/// the oldest files past `retain` (the one being written included). A file retention
/// deleted while it waited is gone as it would have been.
fn publish_closed(c: Closed, dir: &Path, retain: usize) {
    let published = c.file.sync_data().and_then(|_| publish(&c.path));
    match published {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!("HAR file {}: {e}", c.path.display()),
        Ok(()) => {}
    }
    drop(c.file);
    keep_newest(dir, retain);
}

/// Deletes the oldest files in `dir` past `retain` (the one being written included).
fn keep_newest(dir: &Path, retain: usize) {
    match har_files(dir) {
        Ok(mut files) => {
            while files.len() > retain {
                let _ = std::fs::remove_file(files.remove(0));
            }
        }
        Err(e) => tracing::warn!("HAR files in {}: {e}", dir.display()),
    }
}

impl Drop for FileSink {
    /// At shutdown the file being written becomes a `.har`.
    fn drop(&mut self) {
        self.close();
    }
}

impl Current {
    /// Writes `chunk` over the closing `]}}` and the closing again after it; on failure
    /// cuts the file back to what it held.
    fn write(&mut self, chunk: &str) -> Result<(), WriteError> {
        let at = self.size - CLOSE.len() as u64;
        let r = self
            .file
            .seek(SeekFrom::Start(at))
            .and_then(|_| self.file.write_all(chunk.as_bytes()))
            .and_then(|_| self.file.write_all(CLOSE.as_bytes()));
        if let Err(e) = r {
            // The closing bytes go back where they were: that block is still allocated,
            // so this needs no new space on a full disk.
            let undone = self
                .file
                .set_len(at)
                .and_then(|_| self.file.seek(SeekFrom::Start(at)))
                .and_then(|_| self.file.write_all(CLOSE.as_bytes()));
            if let Err(u) = &undone {
                tracing::warn!(
                    "HAR file {}: could not undo a failed write ({u}); repaired at the next rotation",
                    self.path.display()
                );
            }
            return Err(WriteError {
                error: e,
                undone: undone.is_ok(),
            });
        }
        self.size = at + (chunk.len() + CLOSE.len()) as u64;
        Ok(())
    }
}

/// Renames a closed, complete `….har.partial` to `.har`, its entries put in start order.
fn publish(live: &Path) -> std::io::Result<()> {
    let dest = published(live);
    if let Err(e) = write_in_start_order(live, &dest) {
        // The file is whole as it is: published in completion order.
        tracing::warn!("HAR file {}: not put in start order ({e})", live.display());
    }
    match std::fs::rename(live, &dest) {
        // Sorted into `dest` already.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && dest.exists() => Ok(()),
        r => r,
    }
}

/// HAR viewers expect entries in start order; they are written as calls complete. When
/// the closed file at `live` is out of order, writes its entries sorted by
/// `startedDateTime` (ties in completion order) to `dest` through a temporary file, and
/// removes `live`. Memory: an offset and a timestamp per entry.
fn write_in_start_order(live: &Path, dest: &Path) -> std::io::Result<()> {
    let mut r = BufReader::new(File::open(live)?);
    let mut line = Vec::new();
    let mut offset = r.read_until(b'\n', &mut line)? as u64;
    // (startedDateTime, offset, length without the separator)
    let mut entries: Vec<([u8; 24], u64, usize)> = Vec::new();
    loop {
        line.clear();
        let n = r.read_until(b'\n', &mut line)?;
        if n == 0 || line.first() != Some(&b'{') {
            break;
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let entry = text.strip_suffix(b",").unwrap_or(text);
        entries.push((started(entry), offset, entry.len()));
        offset += n as u64;
    }
    if entries.windows(2).all(|w| w[0].0 <= w[1].0) {
        return Ok(());
    }
    entries.sort_by_key(|e| e.0);
    let tmp = live.with_extension(SORTING);
    let written = (|| {
        let mut out = std::io::BufWriter::new(File::create(&tmp)?);
        let mut src = r.into_inner();
        out.write_all(head().as_bytes())?;
        let mut buf = Vec::new();
        for (i, (_, at, len)) in entries.iter().enumerate() {
            buf.resize(*len, 0);
            src.seek(SeekFrom::Start(*at))?;
            std::io::Read::read_exact(&mut src, &mut buf)?;
            out.write_all(if i == 0 { b"\n" } else { b",\n" })?;
            out.write_all(&buf)?;
        }
        out.write_all(CLOSE.as_bytes())?;
        out.into_inner().map_err(|e| e.into_error())?.sync_data()?;
        std::fs::rename(&tmp, dest)
    })();
    match written {
        Ok(()) => std::fs::remove_file(live),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// An entry's `startedDateTime` (fixed width, so the bytes sort as the times do). The
/// key is found as written at the top level: inside a body's text its quotes are escaped.
fn started(entry: &[u8]) -> [u8; 24] {
    const KEY: &[u8] = b"\"startedDateTime\":\"";
    let mut out = [0u8; 24];
    if let Some(i) = memchr::memmem::find(entry, KEY) {
        let v = &entry[i + KEY.len()..];
        let n = v.iter().take(24).take_while(|&&b| b != b'"').count();
        out[..n].copy_from_slice(&v[..n]);
    }
    out
}

fn head() -> String {
    format!(
        "{{\"log\":{{\"version\":\"1.2\",\"creator\":{},\"entries\":[",
        super::entry::creator()
    )
}

/// `….har` for `….har.partial`.
fn published(live: &Path) -> PathBuf {
    let name = live
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    live.with_file_name(format!(
        "{}{SUFFIX}",
        name.strip_suffix(LIVE).unwrap_or(name)
    ))
}

/// Closes every `.har.partial` a crash left in `dir` (see [`repair`]).
fn repair_all(dir: &Path) {
    let Ok(files) = std::fs::read_dir(dir) else {
        return;
    };
    for p in files.filter_map(|e| e.ok()).map(|e| e.path()) {
        // A sort cut short: the `.har.partial` it came from is still there.
        if p.extension().is_some_and(|e| e == SORTING) {
            let _ = std::fs::remove_file(&p);
            continue;
        }
        if is_live(&p)
            && let Err(e) = repair(&p)
        {
            tracing::warn!("HAR file {}: not repaired: {e}", p.display());
        }
    }
}

/// Cuts a file being written back to its last complete entry, closes and publishes it;
/// one with no complete head is deleted.
fn repair(path: &Path) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    match complete_prefix(BufReader::new(&file))? {
        None => std::fs::remove_file(path),
        Some(len) => {
            file.set_len(len)?;
            file.seek(SeekFrom::Start(len))?;
            file.write_all(CLOSE.as_bytes())?;
            file.sync_data()?;
            publish(path)
        }
    }
}

/// The length of the head and every complete entry of a file as this sink writes it (a
/// head line, then one entry a line, `,` between them), each line checked to parse as
/// JSON on its own: where the closing `]}}` goes to make it whole. `None` when even the
/// head is incomplete.
fn complete_prefix(mut r: impl BufRead) -> std::io::Result<Option<u64>> {
    let mut line = Vec::new();
    let mut offset = r.read_until(b'\n', &mut line)? as u64;
    let head = line.strip_suffix(b"\n").unwrap_or(&line);
    if !(head.starts_with(b"{\"log\":") && head.ends_with(b"\"entries\":[")) {
        return Ok(None);
    }
    let mut end = head.len() as u64;
    loop {
        line.clear();
        let n = r.read_until(b'\n', &mut line)?;
        if n == 0 {
            break;
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let entry = text.strip_suffix(b",").unwrap_or(text);
        let complete = entry.first() == Some(&b'{')
            && serde_json::from_slice::<serde::de::IgnoredAny>(entry).is_ok();
        if !complete {
            break;
        }
        end = offset + entry.len() as u64;
        offset += n as u64;
    }
    Ok(Some(end))
}

/// The text of a HAR file as a reader should take it: a `.har` as it is; the file being
/// written cut to its complete entries and closed, whatever moment it is read at.
pub fn document_text(path: &Path) -> std::io::Result<String> {
    let bytes = match std::fs::read(path) {
        // Closed between the listing and this read: it is the `.har` now.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && is_live(path) => {
            return document_text(&published(path));
        }
        r => r?,
    };
    if !is_live(path) {
        return String::from_utf8(bytes).map_err(std::io::Error::other);
    }
    let len = complete_prefix(&bytes[..])?
        .ok_or_else(|| std::io::Error::other("the file being written has no complete head yet"))?;
    let mut text =
        String::from_utf8(bytes[..len as usize].to_vec()).map_err(std::io::Error::other)?;
    text.push_str(CLOSE);
    Ok(text)
}

fn is_live(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(PREFIX) && n.ends_with(LIVE))
}

/// Creates the directory if missing and proves a file can be created in it (what `run`
/// needs).
pub fn ensure_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    probe(dir)
}

/// Whether `run` could write files in `dir`, making it if missing, without making it:
/// a probe file in `dir`, or in its nearest existing ancestor when `dir` is missing
/// (`tollgate check` leaves nothing behind).
pub fn check_dir(dir: &Path) -> std::io::Result<()> {
    let mut existing = dir;
    while !existing.exists() {
        existing = match existing.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
    }
    if !existing.is_dir() {
        return Err(std::io::Error::other(format!(
            "{} is not a directory",
            existing.display()
        )));
    }
    probe(existing)
}

fn probe(dir: &Path) -> std::io::Result<()> {
    let probe = dir.join(format!(".tollgate-check-{}", std::process::id()));
    File::create(&probe)?;
    std::fs::remove_file(&probe)
}

/// tollgate's HAR files in `dir`, oldest first (the names sort by time): the closed
/// `.har` files and the one being written (`.har.partial`, last).
pub fn har_files(dir: &std::path::Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                n.starts_with(PREFIX) && (n.ends_with(SUFFIX) || n.ends_with(LIVE))
            })
        })
        .collect();
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_file_is_cut_back_to_its_complete_entries() {
        let head = head();
        let whole = format!("{head}\n{{\"a\":1}},\n{{\"b\":[2]}}{CLOSE}");
        let at = |s: &str| complete_prefix(s.as_bytes()).unwrap();
        let after_b = whole.len() - CLOSE.len();
        assert_eq!(at(&whole), Some(after_b as u64));
        // Cut inside the second entry, inside the first, right after the head.
        let in_b = whole.find("[2]").unwrap();
        let after_a = head.len() + 1 + r#"{"a":1}"#.len();
        assert_eq!(at(&whole[..in_b]), Some(after_a as u64));
        assert_eq!(at(&whole[..head.len() + 3]), Some(head.len() as u64));
        assert_eq!(at(&whole[..head.len()]), Some(head.len() as u64));
        assert_eq!(at(&head[..10]), None);
        assert_eq!(at(""), None);
        // What repair makes of a cut file parses.
        let cut = &whole[..in_b];
        let fixed = format!("{}{CLOSE}", &cut[..at(cut).unwrap() as usize]);
        let doc: serde_json::Value = serde_json::from_str(&fixed).unwrap();
        assert_eq!(doc["log"]["entries"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn a_rotation_never_waits_for_a_file_to_be_published() {
        let dir = tempfile::tempdir().unwrap();
        let settings = HarFile {
            dir: dir.path().into(),
            max_bytes: 4 << 10,
            max_age: std::time::Duration::from_secs(3600),
            retain: 1000,
        };
        // Publishing held until the appends are done: a disk whose flushes never end.
        let (release, held) = std::sync::mpsc::channel::<()>();
        let held = std::sync::Mutex::new(held);
        let (d, retain) = (settings.dir.clone(), settings.retain);
        let publisher = Publisher::start(Box::new(move |c| {
            let _ = held.lock().unwrap().recv();
            publish_closed(c, &d, retain);
        }));
        let mut sink = FileSink::publishing_with(settings, publisher);
        let entry = |i: usize| {
            format!(
                r#"{{"startedDateTime":"2026-11-23T10:00:{:02}.000Z","n":{i},"pad":"{}"}}"#,
                i % 60,
                "x".repeat(900)
            )
        };
        let entries: Vec<String> = (0..20).map(entry).collect();
        // Four rotations and more: before, each waited for the held flush, and this
        // never returned (the thread below would never answer).
        let (tx, rx) = std::sync::mpsc::channel();
        let appender = std::thread::spawn(move || {
            for chunk in entries.chunks(2) {
                sink.append(chunk).unwrap();
            }
            tx.send(()).unwrap();
            sink
        });
        rx.recv_timeout(std::time::Duration::from_secs(60))
            .expect("the appends returned while the publishing was held");
        let sink = appender.join().unwrap();
        for _ in 0..super::super::publish::QUEUE * 4 {
            let _ = release.send(());
        }
        drop(release);
        drop(sink);
        let mut seen = 0;
        for f in har_files(dir.path()).unwrap() {
            assert!(
                f.to_string_lossy().ends_with(SUFFIX),
                "published: {}",
                f.display()
            );
            let doc: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
            seen += doc["log"]["entries"].as_array().unwrap().len();
        }
        assert_eq!(seen, 20, "every entry in a published file");
    }

    #[test]
    fn a_closed_file_is_published_in_start_order() {
        let dir = tempfile::tempdir().unwrap();
        let entry = |t: &str, body: &str| {
            format!(
                r#"{{"request":{{"postData":{{"text":"{{\"startedDateTime\":\"0000\"}}{body}"}}}},"startedDateTime":"2026-11-23T10:00:{t}Z","time":1}}"#
            )
        };
        let (a, b, c) = (
            entry("01.000", "a"),
            entry("02.500", "b"),
            entry("02.400", "c"),
        );
        let live = dir.path().join(format!("{PREFIX}x-000001{LIVE}"));
        let text = format!("{}\n{b},\n{a},\n{c}{CLOSE}", head());
        std::fs::write(&live, &text).unwrap();
        publish(&live).unwrap();
        assert!(!live.exists());
        let out = std::fs::read_to_string(published(&live)).unwrap();
        assert_eq!(out, format!("{}\n{a},\n{c},\n{b}{CLOSE}", head()));
        let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(doc["log"]["entries"].as_array().unwrap().len(), 3);
        // Already in order: renamed as it is.
        let live = dir.path().join(format!("{PREFIX}y-000002{LIVE}"));
        let text = format!("{}\n{a},\n{b}{CLOSE}", head());
        std::fs::write(&live, &text).unwrap();
        publish(&live).unwrap();
        assert_eq!(std::fs::read_to_string(published(&live)).unwrap(), text);
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 2, "no temporary file left");
    }
}
