//! The file sink: HAR files in a directory, rotated by size and age, the oldest deleted
//! past the retention count. Each file is a valid HAR 1.2 document at all times: an
//! append overwrites the closing `]}}` and writes it again after the new entries, so a
//! viewer can open the file being written and a crash leaves nothing to repair.

use crate::diagnosis::settings::HarFile;
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::time::Instant;

const CLOSE: &str = "\n]}}\n";
const PREFIX: &str = "tollgate-";
const SUFFIX: &str = ".har";

pub struct FileSink {
    settings: HarFile,
    current: Option<Current>,
    seq: u64,
}

struct Current {
    file: File,
    size: u64,
    entries: u64,
    opened: Instant,
}

impl FileSink {
    pub fn new(settings: HarFile) -> std::io::Result<Self> {
        std::fs::create_dir_all(&settings.dir)?;
        Ok(Self {
            settings,
            current: None,
            seq: 0,
        })
    }

    /// Appends entries (each a serialized JSON object), rotating first when due.
    pub fn append(&mut self, entries: &[String]) -> std::io::Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let due = self.current.as_ref().is_none_or(|c| {
            c.size >= self.settings.max_bytes as u64 || c.opened.elapsed() >= self.settings.max_age
        });
        if due {
            self.rotate()?;
        }
        let c = self.current.as_mut().expect("opened by rotate");
        let mut out = String::new();
        for e in entries {
            out.push_str(if c.entries == 0 { "\n" } else { ",\n" });
            out.push_str(e);
            c.entries += 1;
        }
        out.push_str(CLOSE);
        c.file.seek(SeekFrom::Start(c.size - CLOSE.len() as u64))?;
        c.file.write_all(out.as_bytes())?;
        c.size += out.len() as u64 - CLOSE.len() as u64;
        Ok(())
    }

    /// Closes a file that is past its age even when no entry comes.
    pub fn tick(&mut self) {
        if self
            .current
            .as_ref()
            .is_some_and(|c| c.opened.elapsed() >= self.settings.max_age)
        {
            self.current = None;
        }
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        self.seq += 1;
        let stamp = jiff::Timestamp::now().strftime("%Y%m%dT%H%M%S%.3fZ");
        let path = self
            .settings
            .dir
            .join(format!("{PREFIX}{stamp}-{:06}{SUFFIX}", self.seq));
        let mut file = File::create(&path)?;
        let head = format!(
            "{{\"log\":{{\"version\":\"1.2\",\"creator\":{},\"entries\":[",
            super::entry::creator()
        );
        file.write_all(head.as_bytes())?;
        file.write_all(CLOSE.as_bytes())?;
        self.current = Some(Current {
            file,
            size: (head.len() + CLOSE.len()) as u64,
            entries: 0,
            opened: Instant::now(),
        });
        self.retain()
    }

    /// Deletes the oldest files past the retention count (the current one included).
    fn retain(&self) -> std::io::Result<()> {
        let mut files = har_files(&self.settings.dir)?;
        while files.len() > self.settings.retain {
            let _ = std::fs::remove_file(files.remove(0));
        }
        Ok(())
    }
}

/// tollgate's HAR files in `dir`, oldest first (the names sort by time).
pub fn har_files(dir: &std::path::Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(PREFIX) && n.ends_with(SUFFIX))
        })
        .collect();
    files.sort();
    Ok(files)
}
