//! Language runtimes whose frames live outside the native stack: their frames are read at sample
//! time (by the eBPF program) and put in place of the interpreter's own native frames here, after
//! unwinding and before naming.
pub mod functions;
pub mod hotspot;
pub mod memory;
pub mod python;
