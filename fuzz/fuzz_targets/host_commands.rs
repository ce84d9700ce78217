#![no_main]
//! The host interface's first line of defence: a region whose rings and
//! commands a hostile program wrote. The fuzzer writes the ring indices and
//! the command entries; the engine's consumer must catch impossible indices,
//! and every command it reads must decode to a request naming only the data
//! area, or to an errno. A request that decodes must survive the way back:
//! `encode` writes it as a command that decodes to the same request (the
//! property test's inverse, driven here by hostile bytes).
use libfuzzer_sys::fuzz_target;
use softoe_abi::{Command, Layout, Region, Request, SendSource, decode, encode};

fuzz_target!(|data: &[u8]| {
    let Ok(layout) = Layout::new(16, 16, 8, 1 << 16) else {
        return;
    };
    let mut mem = vec![0u128; layout.region_len() as usize / 16];
    let base = mem.as_mut_ptr().cast::<u8>();
    // SAFETY: `mem` is 16-aligned, `region_len` bytes, and outlives `region`.
    let region = unsafe { Region::init(base, layout, 1) };
    let mut consumer = region.command_consumer();
    // The program's side: it writes any tail index and any entries.
    let mut producer = region.command_producer();
    let (head, rest) = data.split_at(data.len().min(4));
    for chunk in rest.chunks(64) {
        let mut b = [0u8; 64];
        b[..chunk.len()].copy_from_slice(chunk);
        let c = Command {
            opcode: u16::from_le_bytes([b[0], b[1]]),
            flags: u16::from_le_bytes([b[2], b[3]]),
            sock: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            tag: u64::from_le_bytes(b[8..16].try_into().unwrap_or_default()),
            args: core::array::from_fn(|i| {
                u64::from_le_bytes(b[16 + 8 * i..24 + 8 * i].try_into().unwrap_or_default())
            }),
        };
        if producer.push(&c).is_err() {
            break;
        }
    }
    if head.len() == 4 {
        // A lying tail, written behind the producer's back.
        let at = core::mem::offset_of!(softoe_abi::RegionHeader, cmd_tail);
        // SAFETY: the word is inside the header and 4-aligned.
        let w = unsafe { core::sync::atomic::AtomicU32::from_ptr(base.add(at).cast()) };
        w.store(
            u32::from_le_bytes([head[0], head[1], head[2], head[3]]),
            core::sync::atomic::Ordering::Release,
        );
    }
    for _ in 0..64 {
        match consumer.pop() {
            Ok(Some(c)) => match decode(&c, &layout) {
                Ok(r) if decode(&encode(&r, c.tag), &layout) != Ok(r) => {
                    panic!("{r:?} does not survive encode and decode")
                }
                Ok(
                    Request::Socket { rx, tx, .. }
                    | Request::Accept { rx, tx, .. }
                    | Request::Adopt { rx, tx, .. },
                ) => {
                    assert!(layout.data_contains(rx.offset, rx.len));
                    assert!(layout.data_contains(tx.offset, tx.len));
                }
                Ok(Request::Send {
                    source: SendSource::Zerocopy { offset } | SendSource::Overlap { offset },
                    len,
                    ..
                }) => assert!(layout.data_contains(offset, len)),
                Ok(Request::Info { offset, len, .. }) => assert!(layout.data_contains(offset, len)),
                _ => {}
            },
            Ok(None) | Err(_) => break,
        }
    }
});
