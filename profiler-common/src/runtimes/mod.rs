//! What the kernel side knows of language runtimes: which processes run one whose frames it
//! walks at sample time ([`RuntimeProcess`], in the `RUNTIME_PROCESSES` map), and what it adds
//! to a sample of them ([`RuntimeTrailer`], then the frame records after the native stacks).
//! Each runtime's own records are in a module of its own.
pub mod go;
pub mod perl;
pub mod php;
pub mod python;
pub mod ruby;

/// Which runtime wrote a sample's frame records, or a [`RuntimeProcess`]'s data: the index of its
/// walkers in each hook's program array.
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RuntimeKind {
    /// No frames: the process runs no runtime walked in the kernel.
    None = 0,
    Python = 1,
    Go = 2,
    Ruby = 3,
    Php = 4,
    Perl = 5,
}

impl RuntimeKind {
    /// The runtimes walked in the kernel. Each has a walker program per hook that records user
    /// stacks, named after the hook's program and [`Self::name`] (`sample_python`), which userspace
    /// puts at this index of the hook's program array.
    pub const WALKED: [Self; 5] = [Self::Python, Self::Go, Self::Ruby, Self::Php, Self::Perl];
    /// Entries of a hook's program array of walkers.
    pub const COUNT: u32 = 6;

    pub const fn from_u16(value: u16) -> Option<Self> {
        match value {
            0 => Some(Self::None),
            1 => Some(Self::Python),
            2 => Some(Self::Go),
            3 => Some(Self::Ruby),
            4 => Some(Self::Php),
            5 => Some(Self::Perl),
            _ => None,
        }
    }

    /// What its walkers' program names end with.
    pub const fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Python => "python",
            Self::Go => "go",
            Self::Ruby => "ruby",
            Self::Php => "php",
            Self::Perl => "perl",
        }
    }
}

/// What the walk of a sampled thread's runtime frames found ([`RuntimeTrailer::walk`]).
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeWalk {
    /// Not walked: the process runs no runtime walked in the kernel.
    NotWalked = 0,
    /// Every frame of the thread (maybe none: a thread outside the runtime's code).
    Complete = 1,
    /// The thread is not one of the runtime's (not started by it, or not yet).
    NotItsThread = 2,
    /// A read of the runtime's memory failed; the frames before it are kept.
    ReadError = 3,
    /// More frames than a record holds: the outermost ones are left out.
    Truncated = 4,
}

impl RuntimeWalk {
    pub const fn from_u16(value: u16) -> Option<Self> {
        match value {
            0 => Some(Self::NotWalked),
            1 => Some(Self::Complete),
            2 => Some(Self::NotItsThread),
            3 => Some(Self::ReadError),
            4 => Some(Self::Truncated),
            _ => None,
        }
    }
}

/// The end of every [`crate::SampleHeader`]: what a runtime adds to a sample.
#[repr(C)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuntimeTrailer {
    /// A [`RuntimeKind`]: whose frame records follow the native stacks.
    pub kind: u16,
    /// A [`RuntimeWalk`].
    pub walk: u16,
    /// Bytes of frame records after the kernel stack, at most [`MAX_RUNTIME_FRAMES_BYTES`].
    pub frames_bytes: u32,
    /// The user registers of [`RUNTIME_REGISTERS`], in its order, taken with the others.
    pub registers: [u64; RUNTIME_REGISTERS.len()],
}

/// A user register besides the instruction, stack and frame pointers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UserRegister {
    R13,
    R15,
}

/// The user registers runtimes need of each sample, each declared here by its runtime: every
/// sample takes them with the others (8 bytes of each record a register, and nothing to look up).
pub const RUNTIME_REGISTERS: [UserRegister; 2] = [
    // HotSpot's interpreter keeps the bytecode pointer of the method it runs there (the frame
    // slot it is saved to is only brought up to date at calls).
    UserRegister::R13,
    // The Zend Engine's VM keeps the op it runs there (its frame's copy is saved at calls).
    UserRegister::R15,
];

/// Where `register` is in [`RuntimeTrailer::registers`].
pub const fn register_index(register: UserRegister) -> usize {
    let mut index = 0;
    while index < RUNTIME_REGISTERS.len() {
        if RUNTIME_REGISTERS[index] as u8 == register as u8 {
            return index;
        }
        index += 1;
    }
    panic!("a register no runtime declared")
}

/// Most bytes of frame records a sample carries: the largest of any runtime's.
pub const MAX_RUNTIME_FRAMES_BYTES: usize = max(
    max(python::MAX_FRAMES_BYTES, ruby::MAX_FRAMES_BYTES),
    max(max(php::MAX_FRAMES_BYTES, perl::MAX_FRAMES_BYTES), go::SAMPLE_BYTES),
);

const fn max(a: usize, b: usize) -> usize {
    if a > b { a } else { b }
}

/// Words of a [`RuntimeProcess`]'s data: room for the largest of any runtime's.
pub const RUNTIME_PROCESS_WORDS: usize = 9;

/// Value of the `RUNTIME_PROCESSES` map: a process whose runtime's frames the kernel walks, and
/// what that runtime's walker needs to find them (its own record, in `data`).
#[repr(C)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuntimeProcess {
    /// A [`RuntimeKind`].
    pub kind: u16,
    pub _pad: [u16; 3],
    pub data: [u64; RUNTIME_PROCESS_WORDS],
}

#[cfg(feature = "user")]
unsafe impl aya::Pod for RuntimeProcess {}

/// A runtime's record in the data of a [`RuntimeProcess`].
///
/// # Safety
/// A `repr(C)` record of integers, aligned to at most 8, every bit pattern of which is one.
pub unsafe trait ProcessRecord: Copy {
    const KIND: RuntimeKind;

    /// The map's value for it.
    fn to_runtime(&self) -> RuntimeProcess {
        const {
            assert!(size_of::<Self>() <= size_of::<[u64; RUNTIME_PROCESS_WORDS]>() && align_of::<Self>() <= 8)
        };
        let mut process =
            RuntimeProcess { kind: Self::KIND as u16, _pad: [0; 3], data: [0; RUNTIME_PROCESS_WORDS] };
        // SAFETY: `data` is 8-byte aligned and has room for the record (asserted above).
        unsafe { process.data.as_mut_ptr().cast::<Self>().write(*self) };
        process
    }

    /// The record in a map value of its kind.
    fn of_runtime(process: &RuntimeProcess) -> Option<&Self> {
        if process.kind != Self::KIND as u16 {
            return None;
        }
        // SAFETY: as in `to_runtime`; any bytes are a record (the trait's contract).
        Some(unsafe { &*process.data.as_ptr().cast::<Self>() })
    }
}

/// Entries of the `RUNTIME_PROCESSES` table.
pub const RUNTIME_PROCESSES_MAX: u32 = 4096;

/// Entries of `RUNTIME_PROCESSES` one user's processes may hold when the whole system is
/// followed (userspace keeps to it).
pub const RUNTIME_USER_SHARE: u32 = RUNTIME_PROCESSES_MAX / 4;
