//! Language runtimes' own frames, in place of the native frames of their interpreters and JIT
//! code: Python's, whose frames live outside the native stack, read at sample time by the eBPF
//! program and merged after unwinding; Java's (HotSpot), on the native stack, stepped and named
//! during unwinding. Both name functions of one table ([`functions`]).
pub mod functions;
pub mod hotspot;
pub mod memory;
pub mod python;
