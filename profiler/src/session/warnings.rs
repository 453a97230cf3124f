//! What the terminal is told at the end beside the consumer's report: why sampling stopped, what
//! was dropped on the way, the limits the targets ran into, and what the kernel side has to say.
use super::{Collector, limits, pipeline::Pipeline, stop::StopReason};
use crate::{
    address_space::{MAX_MAPS_BYTES, MAX_MAPS_READ_TIME, cut_readings},
    kernel::KernelSource,
    model::printable,
    symbolize::NamingReport,
    untrusted::{
        COPY_BUDGET, DESCRIBED_BUDGET, INFLATED, INFLATED_BUDGET, descriptors, refused_copies, remote, unkept,
    },
};

/// Why sampling stopped, when the user may not know (the `reason` of a session an error
/// stopped is `None`).
pub(super) fn stopped(reason: Option<StopReason>) {
    match reason {
        Some(StopReason::Signal) => eprintln!("profiler: stopped by signal"),
        Some(StopReason::MaxSamples) => eprintln!("profiler: stopped at --max-samples"),
        Some(StopReason::Duration | StopReason::TargetsExited) => {}
        None => {
            eprintln!("profiler: stopped by an error (below): what was recorded until then is written")
        }
    }
}

/// Warns, on stderr, about what was dropped on the way (by `pipeline`, and what `naming`
/// refused), the limits that were reached, and what `kernel` has to say.
pub(super) fn warn<C: Collector>(pipeline: &Pipeline<C>, kernel: &C::Kernel, naming: &NamingReport) {
    dropped(pipeline, C::Kernel::RECORDS.noun(), naming);
    limits_reached(pipeline);
    for warning in kernel.warnings() {
        eprintln!("profiler: warning: {warning}");
    }
}

/// What was dropped on the way: task events the kernel lost, `records` that did not decode or
/// could not be processed, and what `naming` refused.
fn dropped<C: Collector>(pipeline: &Pipeline<C>, records: &str, naming: &NamingReport) {
    let lost_task_events = pipeline.walker.address_spaces().lost_events();
    if lost_task_events > 0 {
        eprintln!(
            "profiler: warning: the kernel dropped {lost_task_events} mmap/exec/fork records; some frames may be misattributed"
        );
    }
    if pipeline.malformed > 0 {
        eprintln!("profiler: warning: {} malformed records were skipped", pipeline.malformed);
    }
    if pipeline.failed > 0 {
        eprintln!(
            "profiler: warning: {} {records} could not be processed (see the internal errors above)",
            pipeline.failed
        );
    }
    if naming.failed_jobs > 0 {
        eprintln!(
            "profiler: warning: naming failed {} times (see the internal errors above): some frames are unnamed",
            naming.failed_jobs
        );
    }
    for refused in &naming.refused {
        for line in refused.kept() {
            eprintln!("profiler: warning: {}", printable(line));
        }
        if refused.count() > refused.kept().len() {
            eprintln!("profiler: warning: and {} more like these", refused.count() - refused.kept().len());
        }
    }
}

/// The limits that were reached on what targets may cost: descriptors, the budgets of what
/// they describe, of inflated sections and of copies, network and FUSE files, mappings.
fn limits_reached<C: Collector>(pipeline: &Pipeline<C>) {
    let out_of_descriptors = pipeline.walker.address_spaces().modules().out_of_descriptors();
    if out_of_descriptors > 0 {
        eprintln!(
            "profiler: warning: {out_of_descriptors} times a mapped file could not be opened: the {} descriptors \
             kept for targets' files ({}) were in use; the least recently used modules were let go, and the \
             frames of files not opened are named by address",
            descriptors::cap(),
            limits::describe_open_files()
        );
    }
    let (values, functions) = (unkept(), pipeline.walker.runtimes().functions().unkept());
    if values + functions > 0 {
        eprintln!(
            "profiler: warning: the {} MiB for what targets describe about themselves (runtimes' code objects \
             and methods, the functions they name, perf maps) was spent: {values} things read were not kept \
             (read again when needed), {functions} frames' functions were left unnamed",
            DESCRIBED_BUDGET >> 20
        );
    }
    for line in crate::untrusted::reader::summary() {
        eprintln!("profiler: warning: {line}");
    }
    let given_up = remote::given_up();
    if given_up > 0 {
        eprintln!(
            "profiler: warning: {given_up} files of network file systems were given up on: not copied \
             within {} s; their frames are named by address",
            remote::DEADLINE.as_secs(),
        );
    }
    let not_asked = remote::not_asked_count();
    if not_asked > 0 {
        eprintln!(
            "profiler: warning: {not_asked} files of FUSE file systems or of users' overlays were not read: \
             a FUSE daemon (an overlay's layer may be one) answers root when it likes, and a read that waits \
             for one cannot be stopped; their frames are named by address"
        );
    }
    let cut = cut_readings();
    if cut > 0 {
        eprintln!(
            "profiler: warning: {cut} readings of a process's /proc/PID/maps stopped at {} MiB or {} ms (more \
             mappings, or longer names, than any program has, or a process holding its memory's lock): its \
             mappings past there are unknown",
            MAX_MAPS_BYTES >> 20,
            MAX_MAPS_READ_TIME.as_millis()
        );
    }
    let inflations = INFLATED.refused();
    if inflations > 0 {
        eprintln!(
            "profiler: warning: {inflations} times compressed sections were left compressed: the {} MiB for \
             inflated sections was spent (modules unwound or named without them)",
            INFLATED_BUDGET >> 20
        );
    }
    let refused = refused_copies();
    if let Some(first) = refused.first {
        eprintln!(
            "profiler: warning: the {} MiB for copies of files their owners can change was spent \
             (the first turned away: {} MiB): {} left unread (their frames are named by address), {} read \
             without their DWARF (no lines or inlined frames)",
            COPY_BUDGET >> 20,
            first.div_ceil(1 << 20),
            refused.unread,
            refused.without_dwarf
        );
    }
}
