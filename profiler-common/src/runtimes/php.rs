//! PHP's records: what the kernel is told of a process running the Zend Engine ([`PhpProcess`])
//! and the frames it reads of a sample ([`PhpFrame`]). The engine keeps its frames
//! (`zend_execute_data`) on a VM stack of its own, reused by the next call, so they are read at
//! sample time; the functions they run live on and are named by userspace.
use super::{ProcessRecord, RuntimeKind};

/// Deepest PHP stack recorded, in frames; a deeper one is cut there, its outermost frames left
/// out, and marked [`super::RuntimeWalk::Truncated`].
pub const MAX_PHP_FRAMES: usize = 512;

/// One frame (`zend_execute_data`), as the eBPF program read it at sample time.
#[repr(C)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PhpFrame {
    /// The function it runs (`zend_function *`).
    pub func: u64,
    /// The op it was at (`opline`), as last saved.
    pub opline: u64,
    /// Its call info (`This.u1.type_info`, bits 16-31).
    pub call_info: u32,
    /// Bit set of [`php_frame_flags`].
    pub flags: u32,
}

/// Bits of [`PhpFrame::flags`].
pub mod php_frame_flags {
    /// The outermost frame of one native call of the VM (`execute_ex`): a function of PHP code
    /// entered by a new call of it (`ZEND_CALL_TOP`), which the run of frames from the previous
    /// one's replaces.
    pub const RUN_END: u32 = 1 << 0;
    /// A function of C code (an internal function).
    pub const INTERNAL: u32 = 1 << 1;
}

/// The data of a [`super::RuntimeProcess`] of kind PHP: where its innermost frame is.
#[repr(C)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PhpProcess {
    /// `&executor_globals.current_execute_data` in the process (a build without thread safety,
    /// as every Debian PHP is: one per process, its main thread's).
    pub current_execute_data: u64,
}

impl PhpProcess {
    /// `zend_execute_data`'s fields: `opline`, `func`, the call info, `prev_execute_data`.
    pub const FRAME_OPLINE: u32 = 0;
    pub const FRAME_FUNC: u32 = 24;
    pub const FRAME_CALL_INFO: u32 = 40;
    pub const FRAME_PREV: u32 = 48;
    /// `zend_function.type` of C code (`ZEND_INTERNAL_FUNCTION`).
    pub const INTERNAL_FUNCTION: u8 = 1;
    /// The call info of a frame entered by a new native call of the VM.
    pub const CALL_TOP: u32 = 1 << 17;
}

/// Most bytes of PHP frame records in a sample.
pub const MAX_FRAMES_BYTES: usize = MAX_PHP_FRAMES * core::mem::size_of::<PhpFrame>();

// SAFETY: a `repr(C)` record of integers, every bit pattern of which is one.
unsafe impl ProcessRecord for PhpProcess {
    const KIND: RuntimeKind = RuntimeKind::Php;
}
