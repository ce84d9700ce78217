//! See Cargo.toml: a `no_std` staticlib that links the stack.
#![no_std]

use core::alloc::{GlobalAlloc, Layout};

struct NoAlloc;

// SAFETY: returning null is a valid (failing) allocation; dealloc is never
// reached because nothing is ever allocated.
unsafe impl GlobalAlloc for NoAlloc {
    unsafe fn alloc(&self, _layout: Layout) -> *mut u8 {
        core::ptr::null_mut()
    }
    unsafe fn dealloc(&self, _ptr: *mut u8, _layout: Layout) {}
}

#[global_allocator]
static ALLOC: NoAlloc = NoAlloc;

#[panic_handler]
fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
    loop {}
}

/// Keeps the stack's code in the link.
#[unsafe(no_mangle)]
pub extern "C" fn softoe_nostd_check() -> usize {
    core::mem::size_of::<softoe_stack::Stack>()
        + core::mem::size_of::<softoe_abi::Command>()
        + softoe_wire::checksum::data(&[1, 2, 3]) as usize
        + core::mem::size_of::<softoe_bond::Table>()
        + core::mem::size_of::<softoe_bond::Announcer>()
        + softoe_bond::wire::ArppRepr::parse(&softoe_bond::ArppPacket::new_unchecked(
            &[0u8; 20][..],
        ))
        .map_or(0, |r| r.buffer_len())
}
