#![no_main]
//! The host interface past its decoder: a hostile program's commands, and
//! a peer's traffic, carried out by a session core against a real stack
//! (`softoe_engine::host::drive_commands` says how the input is read).
//! Whatever the program writes, the engine answers with completions and
//! never panics; at the end the session is closed as a dead program's is
//! and its memory given back.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    softoe_engine::host::drive_commands(data);
});
