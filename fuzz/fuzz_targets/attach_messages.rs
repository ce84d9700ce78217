#![no_main]
//! What a program writes on the engine's attach socket after attaching
//! (`Bell` messages) and before (`Hello`): any bytes parse to a message or
//! to nothing, never a panic, and a message read back writes the same
//! meaningful bytes.
use libfuzzer_sys::fuzz_target;
use softoe_abi::{Bell, BellOp, Hello, Welcome};

fuzz_target!(|data: &[u8]| {
    if let Some(b) = Bell::from_bytes(data) {
        let again = b.to_bytes();
        assert_eq!(&again[..], data, "every byte of a bell means something");
        assert_eq!(Bell::from_bytes(&again), Some(b));
        match b.op() {
            Some(BellOp::Add) => assert_eq!(b.op, 1),
            Some(BellOp::Remove) => assert_eq!(b.op, 2),
            Some(BellOp::Watch) => assert_eq!(b.op, 3),
            Some(BellOp::Claim) => assert_eq!(b.op, 4),
            None => assert!(!(1..=4).contains(&b.op)),
        }
    }
    if let Some(h) = Hello::from_bytes(data) {
        assert_eq!(h.to_bytes().as_slice(), data);
    }
    if let Some(w) = Welcome::from_bytes(data) {
        assert_eq!(Welcome::from_bytes(&w.to_bytes()), Some(w));
    }
});
