//! Captures every frame the engine sends and receives, in classic pcap that
//! `tcpdump -r` and `tshark -r` read. Super-segments are written as they went
//! to the port (one large frame), and coalesced frames as they came.
//!
//! Frames are gathered in memory and written out in batches. A write that
//! fails (a full disk) stops the capture, said once as an error: the
//! engine runs on, the file is cut back to the last frame written whole,
//! and the frames that could not be captured are counted
//! ([`Pcap::stopped`] says so at the end).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use pcap_file::DataLink;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use tracing::error;

/// Bytes gathered before they are written to the file.
const BATCH: usize = 64 * 1024;

/// The bytes the pcap writer has produced and the file has not had yet,
/// shared so they can be written out while the writer keeps its end.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.lock().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A pcap file being written.
pub struct Pcap {
    writer: PcapWriter<Shared>,
    pending: Shared,
    file: File,
    path: PathBuf,
    scratch: Vec<u8>,
    /// Frames in `pending`.
    pending_frames: u64,
    /// Frames written to the file.
    written: u64,
    /// The file's length after the last batch written whole.
    good_len: u64,
    /// Frames not captured: those of the batch that failed and every one
    /// after it.
    missed: u64,
    /// The write error that stopped the capture.
    failed: Option<std::io::Error>,
}

impl std::fmt::Debug for Pcap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pcap")
            .field("path", &self.path)
            .field("written", &self.written)
            .field("missed", &self.missed)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

impl Pcap {
    /// Creates (truncates) `path`.
    pub fn create(path: &Path) -> std::io::Result<Pcap> {
        let file = File::create(path)?;
        let pending = Shared::default();
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            snaplen: 262_144,
            ..PcapHeader::default()
        };
        let writer =
            PcapWriter::with_header(pending.clone(), header).map_err(std::io::Error::other)?;
        Ok(Pcap {
            writer,
            pending,
            file,
            path: path.to_path_buf(),
            scratch: Vec::with_capacity(70_000),
            pending_frames: 0,
            written: 0,
            good_len: 0,
            missed: 0,
            failed: None,
        })
    }

    /// Records a frame given in pieces, at `ts` since the Unix epoch.
    pub fn record<'a>(&mut self, ts: Duration, pieces: impl IntoIterator<Item = &'a [u8]>) {
        self.record_with(ts, |frame| {
            for p in pieces {
                frame.extend_from_slice(p);
            }
        });
    }

    /// Records the frame `fill` appends to the (empty) buffer it is given,
    /// at `ts` since the Unix epoch: for frames whose pieces are copied out
    /// rather than borrowed (payload in a program's shared memory).
    pub fn record_with(&mut self, ts: Duration, fill: impl FnOnce(&mut Vec<u8>)) {
        if self.failed.is_some() {
            self.missed += 1;
            return;
        }
        self.scratch.clear();
        fill(&mut self.scratch);
        let len = self.scratch.len() as u32;
        let before = self.pending.lock().len();
        match self
            .writer
            .write_packet(&PcapPacket::new(ts, len, &self.scratch))
        {
            Ok(_) => self.pending_frames += 1,
            Err(_) => {
                // Nothing but a frame pcap cannot hold fails in memory:
                // that one is left out, whole.
                self.pending.lock().truncate(before);
                self.missed += 1;
            }
        }
        if self.pending.lock().len() >= BATCH {
            self.write_out(false);
        }
    }

    /// Writes the gathered frames to the file; on failure, stops the
    /// capture (said once, as an error). `last`: the engine is stopping.
    fn write_out(&mut self, last: bool) {
        if self.failed.is_some() {
            return;
        }
        let shared = self.pending.clone();
        let mut pending = shared.lock();
        if pending.is_empty() {
            return;
        }
        match self.file.write_all(&pending) {
            Ok(()) => {
                self.good_len += pending.len() as u64;
                self.written += self.pending_frames;
            }
            Err(e) => {
                // What reached the file of this batch is cut off, so the
                // file ends after the last frame written whole (a full
                // disk gets the space back; /dev/full has nothing to cut).
                let _ = self.file.set_len(self.good_len);
                self.missed += self.pending_frames;
                error!(
                    "pcap: writing {} failed after {} frames: {e}; the capture stops there{}",
                    self.path.display(),
                    self.written,
                    if last { "" } else { " (the engine runs on)" }
                );
                self.failed = Some(e);
            }
        }
        self.pending_frames = 0;
        pending.clear();
    }

    /// Writes the frames gathered so far to the file (the engine's last
    /// word to it, at the stop).
    pub fn flush(&mut self) {
        self.write_out(true);
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Frames written to the file so far.
    pub fn frames(&self) -> u64 {
        self.written
    }

    /// Frames that could not be captured (after a write failed).
    pub fn missed(&self) -> u64 {
        self.missed
    }

    /// The write error that stopped the capture, if one did.
    pub fn error(&self) -> Option<&std::io::Error> {
        self.failed.as_ref()
    }

    /// If a write failed, a line saying so: "pcap FILE: stopped after N
    /// frames: ERROR; M frames not captured".
    pub fn stopped(&self) -> Option<String> {
        let e = self.failed.as_ref()?;
        Some(format!(
            "pcap {}: stopped after {} frames: {e}; {} frames not captured",
            self.path.display(),
            self.written,
            self.missed
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn frame(i: u32) -> Vec<u8> {
        (0..1000u32).map(|b| (b ^ i) as u8).collect()
    }

    fn read_back(path: &Path) -> Vec<Vec<u8>> {
        let f = File::open(path).unwrap();
        let mut r = pcap_file::pcap::PcapReader::new(f).unwrap();
        let mut out = Vec::new();
        while let Some(p) = r.next_packet() {
            out.push(p.unwrap().data.into_owned());
        }
        out
    }

    #[test]
    fn every_frame_reaches_the_file() {
        let path = std::env::temp_dir().join(format!("softoe-pcap-ok-{}", std::process::id()));
        let mut p = Pcap::create(&path).unwrap();
        for i in 0..300 {
            p.record(Duration::from_secs(1), [&frame(i)[..]]);
        }
        p.flush();
        assert_eq!((p.frames(), p.missed()), (300, 0));
        assert!(p.error().is_none() && p.stopped().is_none());
        let back = read_back(&path);
        let _ = std::fs::remove_file(&path);
        assert_eq!(back.len(), 300);
        assert_eq!(back[299], frame(299));
    }

    /// /dev/full takes the open and fails every write with ENOSPC: the
    /// capture stops, once, and every frame is counted as not captured.
    #[test]
    fn a_full_disk_stops_the_capture_and_counts_what_is_missed() {
        let mut p = Pcap::create(Path::new("/dev/full")).unwrap();
        for i in 0..300 {
            p.record(Duration::from_secs(1), [&frame(i)[..]]);
        }
        p.flush();
        let e = p.error().unwrap();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
        assert_eq!((p.frames(), p.missed()), (0, 300));
        assert_eq!(
            p.stopped().unwrap(),
            format!("pcap /dev/full: stopped after 0 frames: {e}; 300 frames not captured")
        );
    }

    /// A disk that fills part way (a 256 KiB tmpfs; root only): the file
    /// holds exactly the frames counted as written, whole, and the rest
    /// are counted as missed.
    #[test]
    fn a_disk_filling_up_keeps_the_frames_written_whole() {
        let me = i32::try_from(std::process::id()).unwrap();
        if crate::cred::effective_uid(me) != Some(0) {
            eprintln!("not root: skipped");
            return;
        }
        let dir = std::env::temp_dir().join(format!("softoe-pcap-full-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        struct Mounted(PathBuf);
        impl Drop for Mounted {
            fn drop(&mut self) {
                // Lazily: a file still open (a failed assertion's) does
                // not keep it mounted.
                let _ = std::process::Command::new("umount")
                    .arg("-l")
                    .arg(&self.0)
                    .status();
                let _ = std::fs::remove_dir(&self.0);
            }
        }
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
            .arg(&dir)
            .status()
            .unwrap()
            .success();
        let mounted = Mounted(dir.clone());
        assert!(ok, "mount tmpfs");
        let path = dir.join("cap.pcap");
        let mut p = Pcap::create(&path).unwrap();
        for i in 0..300 {
            p.record(Duration::from_secs(1), [&frame(i)[..]]);
        }
        p.flush();
        let (errno, frames, missed) = (
            p.error().and_then(std::io::Error::raw_os_error),
            p.frames(),
            p.missed(),
        );
        // The file is closed before the unmount (else it is busy).
        drop(p);
        let back = read_back(&path);
        drop(mounted);
        assert_eq!(errno, Some(libc::ENOSPC));
        assert_eq!(frames + missed, 300);
        assert_eq!(back.len() as u64, frames);
        assert!(
            frames > 0 && missed > 0,
            "{frames} written, {missed} missed"
        );
        for (i, f) in back.iter().enumerate() {
            assert_eq!(*f, frame(i as u32));
        }
    }
}
