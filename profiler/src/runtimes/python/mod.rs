//! CPython 3.8 to 3.13: finding the interpreter in a process, telling the kernel where its
//! frames are, naming the frames it sends, and putting them in place of the eval loop's native
//! frames.
pub mod layout;
