//! What each eBPF object built from this crate carries (`main.rs`'s and `kernel_names.rs`'s):
//! its license, which decides the helpers the kernel lets it call, and the panic handler
//! `no_std` asks for.

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
