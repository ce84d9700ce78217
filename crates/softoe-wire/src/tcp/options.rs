//! TCP options: MSS (RFC 9293), window scale and timestamps (RFC 7323),
//! SACK-permitted and SACK blocks (RFC 2018).
//!
//! [`TcpOption::parse`] reads one option and returns the rest; it never
//! panics, and rejects an option whose length byte is impossible (0 or 1,
//! past the end of the buffer, the wrong fixed length for MSS, window scale,
//! SACK-permitted or timestamps, a SACK length other than 2 + 8k with
//! 1 ≤ k ≤ 4). Options it does not know come back as
//! [`TcpOption::Unknown`] and emit back byte for byte.

use crate::bytes::{u16_at, u32_at};
use crate::error::{Error, Result};

/// The timestamp option's two values (RFC 7323 §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TcpTimestamp {
    /// TSval: the sender's clock.
    pub tsval: u32,
    /// TSecr: the TSval echoed back (meaningful when ACK is set).
    pub tsecr: u32,
}

/// Up to four SACK blocks: (left edge, right edge) as raw sequence numbers,
/// the first block first; unused slots are `None`.
pub type TcpSackRanges = [Option<(u32, u32)>; 4];

/// Option kinds.
mod kind {
    pub const EOL: u8 = 0;
    pub const NOP: u8 = 1;
    pub const MSS: u8 = 2;
    pub const WS: u8 = 3;
    pub const SACK_PERM: u8 = 4;
    pub const SACK: u8 = 5;
    pub const TS: u8 = 8;
}

/// Longest option data an option's one-byte length can describe.
const MAX_DATA: usize = 255 - 2;

/// One TCP option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpOption<'a> {
    /// End of option list (kind 0): the rest of the option space is padding.
    EndOfList,
    /// No operation (kind 1): padding between options.
    NoOperation,
    /// Maximum segment size (kind 2, length 4).
    MaxSegmentSize(u16),
    /// Window scale shift (kind 3, length 3), as sent (not clamped).
    WindowScale(u8),
    /// SACK permitted (kind 4, length 2).
    SackPermitted,
    /// SACK blocks (kind 5, length 2 + 8k).
    SackRange(TcpSackRanges),
    /// Timestamps (kind 8, length 10).
    Timestamp(TcpTimestamp),
    /// Any other option, kept verbatim.
    Unknown {
        /// Kind (not 0 or 1, which have no length byte).
        kind: u8,
        /// The bytes after kind and length (at most 253).
        data: &'a [u8],
    },
}

impl<'a> TcpOption<'a> {
    /// Parses the option at the start of `buffer`; returns the bytes after it
    /// and the option. After [`EndOfList`](Self::EndOfList) the rest is empty
    /// (what follows is padding). An empty buffer or a malformed option is an
    /// error.
    pub fn parse(buffer: &'a [u8]) -> Result<(&'a [u8], TcpOption<'a>)> {
        let (&k, after_kind) = buffer.split_first().ok_or(Error)?;
        match k {
            kind::EOL => return Ok((&[], TcpOption::EndOfList)),
            kind::NOP => return Ok((after_kind, TcpOption::NoOperation)),
            _ => {}
        }
        let len = usize::from(*after_kind.first().ok_or(Error)?);
        if len < 2 {
            return Err(Error);
        }
        let data = buffer.get(2..len).ok_or(Error)?;
        let rest = buffer.get(len..).ok_or(Error)?;
        let opt = match k {
            kind::MSS if len == 4 => TcpOption::MaxSegmentSize(u16_at(data, 0)),
            kind::WS if len == 3 => TcpOption::WindowScale(data.first().copied().unwrap_or(0)),
            kind::SACK_PERM if len == 2 => TcpOption::SackPermitted,
            kind::TS if len == 10 => TcpOption::Timestamp(TcpTimestamp {
                tsval: u32_at(data, 0),
                tsecr: u32_at(data, 4),
            }),
            kind::SACK if !data.is_empty() && data.len() % 8 == 0 && data.len() <= 32 => {
                let mut r: TcpSackRanges = [None; 4];
                for (slot, block) in r.iter_mut().zip(data.chunks_exact(8)) {
                    *slot = Some((u32_at(block, 0), u32_at(block, 4)));
                }
                TcpOption::SackRange(r)
            }
            kind::MSS | kind::WS | kind::SACK_PERM | kind::TS | kind::SACK => return Err(Error),
            _ => TcpOption::Unknown { kind: k, data },
        };
        Ok((rest, opt))
    }

    /// Length in bytes when emitted. A `SackRange` with no blocks emits
    /// nothing (an empty SACK option would be malformed); an `Unknown`
    /// option's data is cut at 253 bytes.
    pub fn buffer_len(&self) -> usize {
        match self {
            TcpOption::EndOfList | TcpOption::NoOperation => 1,
            TcpOption::MaxSegmentSize(_) => 4,
            TcpOption::WindowScale(_) => 3,
            TcpOption::SackPermitted => 2,
            TcpOption::SackRange(r) => match r.iter().flatten().count() {
                0 => 0,
                n => 2 + 8 * n,
            },
            TcpOption::Timestamp(_) => 10,
            TcpOption::Unknown { data, .. } => 2 + data.len().min(MAX_DATA),
        }
    }

    /// Writes the option at the start of `buffer` and returns the bytes after
    /// it. If `buffer` is shorter than [`buffer_len`](Self::buffer_len),
    /// nothing is written and the empty rest is returned; it never panics.
    pub fn emit<'b>(&self, buffer: &'b mut [u8]) -> &'b mut [u8] {
        let len = self.buffer_len();
        if buffer.len() < len {
            return &mut [];
        }
        let (head, rest) = buffer.split_at_mut(len);
        let mut w = Writer(head);
        match *self {
            TcpOption::EndOfList => w.put(&[kind::EOL]),
            TcpOption::NoOperation => w.put(&[kind::NOP]),
            TcpOption::MaxSegmentSize(m) => {
                w.put(&[kind::MSS, 4]);
                w.put(&m.to_be_bytes());
            }
            TcpOption::WindowScale(s) => w.put(&[kind::WS, 3, s]),
            TcpOption::SackPermitted => w.put(&[kind::SACK_PERM, 2]),
            TcpOption::SackRange(r) => {
                if len > 0 {
                    w.put(&[kind::SACK, len as u8]);
                    for (left, right) in r.iter().flatten() {
                        w.put(&left.to_be_bytes());
                        w.put(&right.to_be_bytes());
                    }
                }
            }
            TcpOption::Timestamp(ts) => {
                w.put(&[kind::TS, 10]);
                w.put(&ts.tsval.to_be_bytes());
                w.put(&ts.tsecr.to_be_bytes());
            }
            TcpOption::Unknown { kind: k, data } => {
                w.put(&[k, len as u8]);
                w.put(data.get(..len - 2).unwrap_or(data));
            }
        }
        rest
    }
}

/// Writes bytes one slice after another into a buffer known to be large
/// enough; silently stops at its end otherwise.
struct Writer<'b>(&'b mut [u8]);

impl Writer<'_> {
    fn put(&mut self, bytes: &[u8]) {
        let buf = core::mem::take(&mut self.0);
        let n = bytes.len().min(buf.len());
        let (head, tail) = buf.split_at_mut(n);
        head.copy_from_slice(bytes.get(..n).unwrap_or(&[]));
        self.0 = tail;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    fn roundtrip(opt: TcpOption<'_>, bytes: &[u8]) {
        assert_eq!(opt.buffer_len(), bytes.len(), "{opt:?}");
        let mut out = vec![0xeeu8; bytes.len() + 3];
        let rest = opt.emit(&mut out);
        assert_eq!(rest.len(), 3);
        assert_eq!(&out[..bytes.len()], bytes);
        let mut input = bytes.to_vec();
        input.extend_from_slice(&[1, 1]);
        let (rest, back) = TcpOption::parse(&input).unwrap();
        assert_eq!(back, opt);
        assert_eq!(rest, &[1, 1]);
    }

    #[test]
    fn fixtures() {
        roundtrip(TcpOption::NoOperation, &[1]);
        roundtrip(TcpOption::MaxSegmentSize(1460), &[2, 4, 0x05, 0xb4]);
        roundtrip(TcpOption::WindowScale(7), &[3, 3, 7]);
        roundtrip(TcpOption::SackPermitted, &[4, 2]);
        roundtrip(
            TcpOption::Timestamp(TcpTimestamp {
                tsval: 0x0102_0304,
                tsecr: 0x0506_0708,
            }),
            &[8, 10, 1, 2, 3, 4, 5, 6, 7, 8],
        );
        roundtrip(
            TcpOption::SackRange([Some((1, 2)), Some((0xffff_ffff, 3)), None, None]),
            &[
                5, 18, 0, 0, 0, 1, 0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 3,
            ],
        );
        roundtrip(
            TcpOption::Unknown {
                kind: 254,
                data: &[9, 9, 9],
            },
            &[254, 5, 9, 9, 9],
        );
        roundtrip(
            TcpOption::Unknown {
                kind: 30,
                data: &[],
            },
            &[30, 2],
        );
        // End of list swallows the padding after it.
        assert_eq!(
            TcpOption::parse(&[0, 7, 7]).unwrap(),
            (&[][..], TcpOption::EndOfList)
        );
        let mut b = [9u8; 2];
        assert_eq!(TcpOption::EndOfList.emit(&mut b).len(), 1);
        assert_eq!(b, [0, 9]);
    }

    #[test]
    fn malformed() {
        for bad in [
            &[][..],
            &[2],                         // no length byte
            &[2, 0],                      // length 0
            &[2, 1],                      // length 1
            &[2, 4, 5],                   // past the end
            &[2, 3, 5],                   // MSS of length 3
            &[2, 5, 5, 0, 0],             // MSS of length 5
            &[3, 4, 1, 1],                // WS of length 4
            &[3, 2],                      // WS of length 2
            &[4, 3, 0],                   // SACK-permitted of length 3
            &[8, 9, 0, 0, 0, 0, 0, 0, 0], // TS of length 9
            &[5, 2],                      // SACK with no block
            &[5, 9, 0, 0, 0, 0, 0, 0, 0], // SACK not 2 + 8k
            &[254, 3],                    // unknown, past the end
        ] {
            assert!(TcpOption::parse(bad).is_err(), "{bad:?}");
        }
        let mut five = vec![5u8, 42];
        five.extend_from_slice(&[0; 40]);
        assert!(TcpOption::parse(&five).is_err(), "five SACK blocks");
    }

    #[test]
    fn emit_into_short_buffers_writes_nothing() {
        let mut b = [0u8; 9];
        let ts = TcpOption::Timestamp(TcpTimestamp { tsval: 1, tsecr: 2 });
        assert!(ts.emit(&mut b).is_empty());
        assert_eq!(b, [0; 9]);
        assert!(TcpOption::NoOperation.emit(&mut []).is_empty());
        // Empty SACK: nothing to write, whole buffer left.
        assert_eq!(TcpOption::SackRange([None; 4]).emit(&mut b).len(), 9);
        // Oversized unknown data is cut at 253 bytes.
        let big = [7u8; 300];
        let opt = TcpOption::Unknown {
            kind: 99,
            data: &big,
        };
        assert_eq!(opt.buffer_len(), 255);
        let mut out = [0u8; 255];
        opt.emit(&mut out);
        let (rest, back) = TcpOption::parse(&out).unwrap();
        assert!(rest.is_empty());
        assert_eq!(
            back,
            TcpOption::Unknown {
                kind: 99,
                data: &big[..253]
            }
        );
    }

    fn arb_option() -> impl Strategy<Value = (u8, Vec<u8>, TcpSackRanges, u32, u32, u16)> {
        (
            0u8..8,
            proptest::collection::vec(any::<u8>(), 0..40),
            proptest::array::uniform4(proptest::option::of(any::<(u32, u32)>())),
            any::<u32>(),
            any::<u32>(),
            any::<u16>(),
        )
    }

    proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut rest = &bytes[..];
            while let Ok((r, _)) = TcpOption::parse(rest) {
                prop_assert!(r.len() < rest.len() || rest.is_empty());
                rest = r;
                if rest.is_empty() {
                    break;
                }
            }
        }

        #[test]
        fn emit_parse_roundtrip((which, data, sack, a, b, m) in arb_option()) {
            let opt = match which {
                0 => TcpOption::NoOperation,
                1 => TcpOption::MaxSegmentSize(m),
                2 => TcpOption::WindowScale(m as u8),
                3 => TcpOption::SackPermitted,
                4 => TcpOption::Timestamp(TcpTimestamp { tsval: a, tsecr: b }),
                5 => TcpOption::SackRange(sack),
                _ => TcpOption::Unknown { kind: 9 + (m as u8 % 240), data: &data },
            };
            let mut out = vec![0u8; opt.buffer_len()];
            prop_assert!(opt.emit(&mut out).is_empty());
            if let TcpOption::SackRange(r) = opt {
                let blocks: Vec<_> = r.iter().flatten().copied().collect();
                if blocks.is_empty() {
                    prop_assert!(out.is_empty());
                    return Ok(());
                }
                let (rest, back) = TcpOption::parse(&out).unwrap();
                prop_assert!(rest.is_empty());
                let TcpOption::SackRange(back) = back else { panic!("{back:?}") };
                let back: Vec<_> = back.iter().flatten().copied().collect();
                prop_assert_eq!(back, blocks);
            } else {
                let (rest, back) = TcpOption::parse(&out).unwrap();
                prop_assert!(rest.is_empty());
                prop_assert_eq!(back, opt);
            }
        }
    }
}
