//! HAR files as other programs see them: a reader running beside the writer only ever
//! finds complete HAR documents under the `.har` name, a full disk costs entries (counted)
//! but never a document, and the file being written is readable whole at any moment.

use crate::support::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tollgate::diagnosis::har::{file::har_files, read};

fn har_config(dir: &Path, file: &str) -> String {
    format!(
        "diagnosis:\n  har:\n    enabled: true\n    file: {{ dir: {}, {file} }}\n",
        dir.display()
    )
}

/// The closed files (`.har`): what a reader that knows nothing of tollgate opens.
fn closed(dir: &Path) -> Vec<PathBuf> {
    har_files(dir)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "har"))
        .collect()
}

/// Entries of a complete HAR document, or why it is not one.
fn entries(bytes: &[u8]) -> Result<usize, String> {
    let doc: Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    doc["log"]["entries"]
        .as_array()
        .map(|a| a.len())
        .ok_or_else(|| "no log.entries".into())
}

async fn load(gw: &tollgate::Gateway, up: std::net::SocketAddr, calls: usize, tag: &str) {
    let c = client();
    let mut tasks = Vec::new();
    for w in 0..8 {
        let (c, gw_addr) = (c.clone(), gw.proxy_addr);
        let tag = tag.to_owned();
        tasks.push(tokio::spawn(async move {
            for i in (w..calls).step_by(8) {
                let req = http::Request::get(format!("http://{gw_addr}/{tag}/{i}"))
                    .header("x-tollgate-host", up.to_string())
                    .header("x-tollgate-scheme", "http")
                    .body(empty())
                    .unwrap();
                assert_eq!(send(&c, req).await.status, 200);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_beside_the_writer_only_finds_complete_documents() {
    let dir = tempfile::tempdir().unwrap();
    let up = upstream(|_req| async { answer(200, &[], &"r".repeat(2000)) }).await;
    let gw = gateway(&har_config(dir.path(), "max_bytes: 16KiB, retain: 10000")).await;
    // Another process's view: read every `.har` file over and over while calls are
    // captured and files rotate.
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let reader = {
        let (dir, stop, reads) = (dir.path().to_owned(), stop.clone(), reads.clone());
        std::thread::spawn(move || {
            let mut broken = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                for f in closed(&dir) {
                    let Ok(bytes) = std::fs::read(&f) else {
                        continue;
                    };
                    reads.fetch_add(1, Ordering::Relaxed);
                    if let Err(e) = entries(&bytes) {
                        broken.push(format!("{}: {e} ({} bytes)", f.display(), bytes.len()));
                    }
                }
                // A pause between passes: a reader spinning flat out on a 2-core machine
                // starves the writer it watches.
                std::thread::sleep(Duration::from_millis(1));
            }
            broken
        })
    };
    load(&gw, up.addr, 600, "read").await;
    let all = wait_for_entries(dir.path(), 600).await;
    stop.store(true, Ordering::Relaxed);
    let broken = reader.join().unwrap();
    assert!(broken.is_empty(), "{broken:#?}");
    assert!(reads.load(Ordering::Relaxed) > 0, "the reader read files");
    assert_eq!(all, 600);
    assert!(closed(dir.path()).len() > 10, "files rotated while read");
}

/// Polls until the directory's files (the one being written read whole) hold `n`
/// entries; fails when they never do.
async fn wait_for_entries(dir: &Path, n: usize) -> usize {
    let mut last = Err(String::new());
    // Up to 30 s: a loaded CI machine writes slowly, and a wait that ends only fails.
    for _ in 0..3000 {
        last = read::load(dir).map(|e| e.len());
        if last.as_ref().is_ok_and(|&got| got >= n) {
            return *last.as_ref().unwrap();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{dir:?} did not get {n} entries: {last:?}");
}

/// A sample's value in Prometheus text (0 when absent).
fn metric(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// A tmpfs of `kib` KiB mounted on a fresh directory, unmounted when dropped.
struct SmallDisk(tempfile::TempDir);

impl SmallDisk {
    fn mount(kib: usize) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok,
            "mounting a small tmpfs needs root (CI runs as root): run this test as root"
        );
        Self(dir)
    }

    /// Writes a file until the disk is full, then gives `room` bytes back.
    fn fill(&self, room: u64) -> PathBuf {
        use std::io::Write;
        let p = self.0.path().join("filler");
        let mut f = std::fs::File::create(&p).unwrap();
        let chunk = vec![0u8; 4096];
        while f.write_all(&chunk).is_ok() {}
        let len = f.metadata().unwrap().len();
        f.set_len(len.saturating_sub(room)).unwrap();
        p
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_costs_entries_never_a_document() {
    let disk = SmallDisk::mount(2048);
    let dir = disk.0.path().join("har");
    let up = upstream(|_req| async { answer(200, &[], &"d".repeat(1000)) }).await;
    // Small files: the disk fills while files rotate, so new files and first entries
    // meet the full disk too, not only appends.
    let gw = gateway(&har_config(&dir, "max_bytes: 4KiB, retain: 10000")).await;
    load(&gw, up.addr, 20, "before").await;
    wait_for_entries(&dir, 20).await;
    let filler = disk.fill(12 << 10);

    load(&gw, up.addr, 200, "full").await;
    // Every call of the full phase is either written or counted as dropped.
    let text = metrics_when(&gw, |t| {
        metric(t, "tollgate_har_entries_total{sink=\"encoded\"}") >= 220
            && metric(t, "tollgate_har_dropped_total{sink=\"file\"}") > 0
    })
    .await;
    assert!(
        metric(&text, "tollgate_har_dropped_total{sink=\"file\"}") > 0,
        "failed writes are counted: {text}"
    );
    // Every file is a whole document while the disk is full.
    for f in har_files(&dir).unwrap() {
        read::load(&f).unwrap_or_else(|e| panic!("{e}"));
    }
    for f in closed(&dir) {
        entries(&std::fs::read(&f).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
    }
    // Space comes back: new entries are written, and every file still parses.
    std::fs::remove_file(filler).unwrap();
    load(&gw, up.addr, 20, "after").await;
    let (mut after, mut last_error) = (0, None);
    for _ in 0..1000 {
        // A file the writer has just opened may not hold its whole head yet: that is a
        // moment of the write, not a broken document (closed files are checked below).
        match read::load(&dir) {
            Ok(all) => {
                after = all
                    .iter()
                    .filter(|e| e["request"]["url"].as_str().unwrap().contains("/after/"))
                    .count();
            }
            Err(e) => last_error = Some(e.to_string()),
        }
        if after == 20 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        after, 20,
        "entries are written again once space is back (last read error: {last_error:?})"
    );
    for f in closed(&dir) {
        entries(&std::fs::read(&f).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
    }
    drop(gw);
}
