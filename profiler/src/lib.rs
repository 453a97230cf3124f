//! profiler: a system-wide sampling profiler for Linux built on eBPF.
//!
//! Data flows one way (see ARCHITECTURE.md): [`kernel`] (the eBPF side and its ring) → `decode`
//! → `walk` (unwind, with `address_space` pinning addresses to module + offset) → `aggregate`
//! → `symbolize` → the `model` → `render` → `output`. A `session` drives the stages for each
//! command that samples; `commands` wire modes into it. Whatever a target controls (its files,
//! its `/proc` text, what it describes about itself) is read through `untrusted`.
//!
//! The library exists for the binary, the benchmarks, the fuzz targets and the tests: what they
//! reach is re-exported here, everything else is private.
#![cfg_attr(feature = "testing", warn(unreachable_pub))]

mod address_space;
mod aggregate;
mod cli;
mod clock;
mod commands;
mod decode;
mod export;
mod frame;
mod kernel;
mod model;
mod named;
mod output;
mod render;
mod runtimes;
mod session;
mod symbolize;
mod untrusted;
mod unwind;
mod walk;

#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use crate::{
    cli::Cli,
    commands::run,
    decode::{DecodeError, Payload, RecordKind, RingRecord, SampleRecord, UserRegs},
    model::{
        Location, Meta, ModuleInfo, Recording, Sample, SourceLine, Symbol, SymbolKind, Tgid, ThreadState,
        Tid, filter::Filter, printable, raw,
    },
    render::{Format, Grouping, RenderOptions, pprof::proto as pprof, render},
    untrusted::reader::{READER_ARG, serve as serve_memory_reads},
};

/// The stages, for benchmarks and fuzz targets that drive them without BPF.
#[cfg(feature = "testing")]
pub mod stages {
    pub use crate::{
        address_space::{AddressSpaces, Backing, Mappings, ProcessView, Resolved, TaskEvent, Tracking, Want},
        aggregate::Aggregate,
        frame::Frame,
        kernel::task_events::{self, TaskEventReader},
        render::folded,
        runtimes::Runtimes,
        symbolize::{DebugInfo, Namer, NewFrames, PerfMap, PerfMaps, PltStubs, Symbolizer, jitdump},
        untrusted::ElfFacts,
        unwind::{MAX_FRAMES, NoRuntime, StackSnapshot, Unwinder, cfi::ModuleCfi},
        walk::{CallGraph, StackWalker, Walked},
    };

    /// What each runtime's recogniser makes of a file a process maps (the `elf_file` fuzz
    /// target).
    pub mod runtime_images {
        pub use crate::runtimes::{
            hotspot::vm_structs::Image as HotSpotImage, python::interpreter::Image as PythonImage,
            v8::image::Image as V8Image,
        };
    }

    /// HotSpot's walk and naming over fixture memory (the `hotspot_walk` fuzz target).
    pub mod hotspot {
        pub use crate::runtimes::hotspot::{
            code_cache::{BlobKind, Heap},
            fixture,
        };
    }

    /// Go's table of functions over any bytes (the `go_table` fuzz target).
    pub mod go {
        pub use crate::runtimes::go::{
            fixture,
            table::{Function, GoTable, Located, MAX_INLINED, MAX_STRING, Placement, Version, Work},
        };
    }

    /// V8's walk and naming over fixture memory (the `v8_walk` fuzz target).
    pub mod v8 {
        pub use crate::runtimes::v8::{
            fixture,
            heap::{MAX_NAME, MAX_SOURCE},
        };
    }

    /// Ruby's frames named from any memory, and its objects made by hand (the `ruby_names`
    /// fuzz target).
    pub mod ruby {
        pub use crate::runtimes::ruby::fixture;
    }

    /// Perl's frames named from any memory, and its subs and statements made by hand (the
    /// `perl_names` fuzz target).
    pub mod perl {
        pub use crate::runtimes::perl::fixture;
    }

    /// CPython's code objects and line tables over any memory (the Python fuzz targets and
    /// benchmarks).
    pub mod python {
        pub use crate::runtimes::python::{
            code::{
                LineTables, MAX_FILE_CHARS, MAX_LINE_TABLE_BYTES, MAX_NAME_CHARS, Types, instruction_offset,
                read,
            },
            layout::{LineTable, OB_TYPE, layouts},
            line_table::Lines,
        };
    }
}
