//! Captures every frame the engine sends and receives, in classic pcap that
//! `tcpdump -r` and `tshark -r` read. Super-segments are written as they went
//! to the port (one large frame), and coalesced frames as they came.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pcap_file::DataLink;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};

/// The file under the pcap writer, shared so it can be flushed while the
/// writer keeps it.
#[derive(Clone)]
struct Shared(Arc<Mutex<BufWriter<File>>>);

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| std::io::Error::other("pcap lock poisoned"))?
            .write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0
            .lock()
            .map_err(|_| std::io::Error::other("pcap lock poisoned"))?
            .flush()
    }
}

/// A pcap file being written.
pub struct Pcap {
    writer: PcapWriter<Shared>,
    file: Shared,
    scratch: Vec<u8>,
}

impl std::fmt::Debug for Pcap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pcap").finish_non_exhaustive()
    }
}

impl Pcap {
    /// Creates (truncates) `path`.
    pub fn create(path: &Path) -> std::io::Result<Pcap> {
        let file = Shared(Arc::new(Mutex::new(BufWriter::new(File::create(path)?))));
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            snaplen: 262_144,
            ..PcapHeader::default()
        };
        let writer =
            PcapWriter::with_header(file.clone(), header).map_err(std::io::Error::other)?;
        Ok(Pcap {
            writer,
            file,
            scratch: Vec::with_capacity(70_000),
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
        self.scratch.clear();
        fill(&mut self.scratch);
        let len = self.scratch.len() as u32;
        let _ = self
            .writer
            .write_packet(&PcapPacket::new(ts, len, &self.scratch));
    }

    /// Flushes buffered packets to the file.
    pub fn flush(&mut self) {
        let _ = self.file.flush();
    }
}
