//! CRuby 3.1 and 3.3: finding the VM in a process, telling the kernel where each thread's
//! execution context is, naming the control frames it sends, and putting them in place of the
//! VM's native frames.
//!
//! Discovery finds a libruby (or a `ruby` with the VM linked in: a file that defines
//! `ruby_version`) and has [`Ruby::recognise`] read it ([`image`]). Attaching finds where
//! `ruby_current_ec` is from a thread's thread pointer, through glibc's thread descriptor (see
//! [`thread_local_offset`]); the kernel then walks each sample's control frames. Each frame it
//! sends names an instruction sequence or a method entry by address, read from `/proc/PID/mem`
//! when the sample is walked and cached per process.
mod image;
mod layout;
mod names;

/// Ruby's objects made by hand, and a frame named from any memory (the `ruby_names` fuzz target).
#[cfg(feature = "testing")]
pub use self::names::fixture;

use std::sync::Arc;

use anyhow::anyhow;
use bytemuck::pod_read_unaligned;
use profiler_common::runtimes::{
    ProcessRecord, RuntimeKind, RuntimeProcess, RuntimeWalk,
    ruby::{MAX_RUBY_FRAMES, RubyFrame, RubyProcess, ruby_frame_flags, thread_states},
};

use self::{
    image::{Image, Vm},
    layout::Layout,
    names::{Iseq, Method, full_label, read_iseq, read_method},
};
use super::{
    ImageFile, Mark, Refusal, Runtime,
    functions::{FunctionRef, Functions},
    memory::{self, Allowance, ProcessMemory},
    merge::Runs,
};
use crate::{
    address_space::{Mapping, ModuleId, ProcessView},
    decode::RuntimeFrames,
    frame::Frame,
    model::{LabelSet, SymbolKind},
    untrusted::Cache,
};

/// What its functions' frames say they are.
const LANGUAGE: &str = "Ruby";

/// What a frame, or what it names, holds in a cache besides its strings, about.
const ENTRY_BYTES: u64 = 64;

/// CRuby, as a [`Runtime`]: what became of its samples, and one sample's scratch.
#[derive(Default)]
pub(crate) struct Ruby {
    stats: RubyStats,
    /// Scratch: one sample's frames, and its runs.
    runs: Runs,
}

/// A process running a Ruby VM that is read.
pub(crate) struct Running {
    vm: Arc<Vm>,
    module: ModuleId,
    process: RubyProcess,
    /// `ruby_global_symbols` in the process.
    global_symbols: u64,
    memory: ProcessMemory,
    /// What a frame's instruction sequence and method entry name (by their addresses), and frames
    /// by (instruction sequence, method entry, program counter), under the budget of what
    /// targets describe.
    names: Cache<(u64, u64), Option<Named>>,
    frames: Cache<(u64, u64, u64), (Frame, FunctionRef)>,
}

#[derive(Clone)]
struct Named {
    function: FunctionRef,
    iseq: Option<Arc<Iseq>>,
}

/// What became of the samples of Ruby processes, for the run summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct RubyStats {
    with_frames: u64,
    /// Samples of a thread Ruby did not make.
    not_its_thread: u64,
    read_errors: u64,
    truncated: u64,
    /// Frames whose instruction sequence or method could not be read by the time it was.
    unreadable: u64,
    /// Frames left unnamed in their sample for want of its allowance of reads.
    deferred: u64,
    /// Samples taken while the VM collected garbage, and of threads waiting for the GVL.
    in_gc: u64,
    waiting_for_gvl: u64,
}

impl Runtime for Ruby {
    type Image = Vm;
    type Instance = Running;

    const LABEL: &'static str = "ruby";
    const NAME: &'static str = "CRuby";
    const KIND: RuntimeKind = RuntimeKind::Ruby;
    const RECHECK_NS: u64 = 200_000_000;

    /// The VM defines `ruby_version`; extensions and the `ruby` launcher only refer to it.
    fn marks(mark: Mark<'_>) -> bool {
        mark == Mark::Symbol(b"ruby_version")
    }

    fn recognise(file: &ImageFile<'_>) -> anyhow::Result<Option<Vm>> {
        match Image::read(file.bytes, file.facts) {
            Image::Supported(vm) => Ok(Some(vm)),
            Image::Unsupported(what) => Err(anyhow!(what)),
            Image::NotRuby => Ok(None),
        }
    }

    fn attach(
        &mut self,
        view: &mut ProcessView<'_>,
        vm: &Arc<Vm>,
        module: ModuleId,
        mapping: &Mapping,
        allowance: &Arc<Allowance>,
    ) -> Result<Running, Refusal> {
        let bias = view
            .module(module)
            .facts()
            .and_then(|facts| facts.load_bias(mapping.start, mapping.offset, mapping.end - mapping.start))
            .ok_or_else(|| Refusal::NotYet(anyhow!("where its VM is loaded is not known")))?;
        let mut memory = ProcessMemory::new(view.tgid(), view.identity().user, allowance.clone());
        let ec_offset = thread_local_offset(&mut memory, vm, bias)?;
        let process = RubyProcess {
            ec_offset,
            control_frame_bytes: vm.layout.control_frame_bytes,
            vm_objspace: vm.layout.vm_objspace,
            ractor_gvl_owner: vm.layout.ractor_gvl_owner,
            thread_status: vm.layout.thread_status,
            thread_blocking_region: vm.layout.thread_blocking_region,
            _pad: 0,
            vm_ptr: vm.vm_ptr.wrapping_add(bias),
        };
        Ok(Running {
            vm: vm.clone(),
            module,
            process,
            global_symbols: vm.global_symbols.wrapping_add(bias),
            memory,
            names: Cache::default(),
            frames: Cache::default(),
        })
    }

    fn kernel_process(&self, running: &Running) -> Option<RuntimeProcess> {
        Some(running.process.to_runtime())
    }

    /// Its VM's frames are recognised by the VM's module.
    fn pinned_module(&self, running: &Running) -> Option<ModuleId> {
        Some(running.module)
    }

    fn relieve(&mut self, running: &mut Running) {
        running.names.relieve();
        running.frames.relieve();
    }

    fn inspect(&self, running: &Running) -> String {
        format!(
            "Ruby {} read: ruby_current_ec at {} from the thread pointer, its threads' frames walked at each sample",
            running.vm.release, running.process.ec_offset
        )
    }

    /// Puts the Ruby frames of a sample in place of the VM's native calls (`rb_vm_exec`) in
    /// `frames` (the sample's stack, walked and pinned to modules, innermost first).
    fn merge(
        &mut self,
        running: &mut Running,
        sample: RuntimeFrames<'_>,
        frames: &mut Vec<Frame>,
        _labels: &mut LabelSet,
        functions: &mut Functions,
    ) {
        match sample.walk {
            RuntimeWalk::NotWalked => return,
            RuntimeWalk::NotItsThread => self.stats.not_its_thread += 1,
            RuntimeWalk::ReadError => self.stats.read_errors += 1,
            RuntimeWalk::Truncated => self.stats.truncated += 1,
            RuntimeWalk::Complete => {}
        }
        let records = sample.records.as_chunks::<{ size_of::<RubyFrame>() }>().0;
        if records.is_empty() {
            return;
        }
        self.stats.with_frames += 1;
        let Self { stats, runs } = self;
        runs.clear();
        for record in records {
            let record = pod_read_unaligned::<RubyFrame>(record);
            if let Some(state) = thread_state(record.pc_flags, stats) {
                let function = functions.intern(state, "", 0, SymbolKind::Script, Some(LANGUAGE));
                runs.push(Frame::Runtime { function: function.id, line: 0 });
            } else if record.iseq != 0 || record.method != 0 {
                runs.push(running.frame(&record, functions, stats));
            }
            if record.pc_flags & ruby_frame_flags::RUN_END != 0 {
                runs.end_run();
            }
        }
        let (module, vm_exec) = (running.module, &running.vm.vm_exec);
        let is_vm_exec = |frame: &Frame| match *frame {
            Frame::Module { module: m, offset } => m == module && vm_exec.contains(&offset),
            _ => false,
        };
        runs.merge_into(frames, is_vm_exec);
        name_jit_code(frames, functions);
    }

    fn describe(&self, _running: &mut dyn Iterator<Item = &Running>) -> Vec<String> {
        let stats = &self.stats;
        let mut lines = Vec::new();
        let missed = stats.not_its_thread + stats.read_errors + stats.truncated;
        if stats.with_frames + missed > 0 {
            lines.push(format!(
                "{} samples with Ruby frames; {} of threads Ruby did not make, {} cut by a failed read, {} deeper \
                 than {MAX_RUBY_FRAMES} frames; {} frames whose code or method could not be read; {} in the GC, {} waiting for the GVL",
                stats.with_frames,
                stats.not_its_thread,
                stats.read_errors,
                stats.truncated,
                stats.unreadable,
                stats.in_gc,
                stats.waiting_for_gvl
            ));
        }
        if stats.deferred > 0 {
            lines.push(memory::spent_line(stats.deferred, "Ruby", "the process's memory"));
        }
        lines
    }
}

/// Where `ruby_current_ec` is from a thread's thread pointer, in the process whose VM `vm` is
/// loaded at `bias`. libruby reaches it through `__tls_get_addr`, but a library loaded with the
/// program has its TLS block in the static TLS area, at one offset from every thread's pointer
/// (glibc's `tcbhead_t`): the main thread's descriptor (which Ruby keeps as its thread id) leads
/// to its DTV, the DTV to libruby's block by the module id the loader wrote in the GOT pair. The
/// main thread's context is then checked to be its.
fn thread_local_offset(memory: &mut ProcessMemory, vm: &Vm, bias: u64) -> Result<i64, Refusal> {
    let mut word = |addr: u64| {
        let mut bytes = [0u8; 8];
        memory.read(addr, &mut bytes).then(|| u64::from_le_bytes(bytes))
    };
    let not_yet = |what: &str| Refusal::NotYet(anyhow!("{what} could not be read"));
    let vm_struct = word(vm.vm_ptr.wrapping_add(bias)).ok_or_else(|| not_yet("ruby_current_vm_ptr"))?;
    if vm_struct == 0 {
        return Err(Refusal::NotYet(anyhow!("the Ruby VM is not started yet")));
    }
    let layout = vm.layout;
    let main_thread = word(vm_struct + layout.vm_main_thread)
        .filter(|&t| t != 0)
        .ok_or_else(|| not_yet("the main thread"))?;
    let native = match layout.thread_native {
        Some(offset) => word(main_thread + offset).ok_or_else(|| not_yet("the main thread"))?,
        None => main_thread,
    };
    let thread_pointer =
        word(native + layout.native_thread_id).ok_or_else(|| not_yet("the main thread's id"))?;
    let dtv = word(thread_pointer.wrapping_add(DTV_IN_TCB)).ok_or_else(|| not_yet("its DTV"))?;
    let module_id = word(vm.ec_got.wrapping_add(bias)).ok_or_else(|| not_yet("libruby's TLS module id"))?;
    if module_id == 0 || module_id > MAX_TLS_MODULES {
        return Err(Refusal::Never(anyhow!("libruby's TLS module id is {module_id}")));
    }
    let block =
        word(dtv.wrapping_add(module_id * DTV_ENTRY_BYTES)).ok_or_else(|| not_yet("libruby's TLS block"))?;
    let offset = block.wrapping_add(vm.ec_in_block).wrapping_sub(thread_pointer) as i64;
    if !(-MAX_STATIC_TLS..0).contains(&offset) {
        return Err(Refusal::Never(anyhow!(
            "libruby's thread-local variables are not in static TLS (at {offset} from the thread pointer)"
        )));
    }
    let ec = word(thread_pointer.wrapping_add_signed(offset))
        .ok_or_else(|| not_yet("the main thread's context"))?;
    if ec != 0 && word(ec + RubyProcess::EC_THREAD) != Some(main_thread) {
        return Err(Refusal::Never(anyhow!("the main thread's ruby_current_ec is not its own")));
    }
    Ok(offset)
}

/// Names the code in anonymous memory inner to a sample's Ruby frames (`frames`, merged,
/// innermost first) as YJIT's, the one JIT of a Ruby process that writes no file: 3.1's writes no
/// perf map either, and its code has no CFI, so the native unwind stopped there.
fn name_jit_code(frames: &mut [Frame], functions: &mut Functions) {
    let Some(innermost_ruby) = frames.iter().position(|frame| matches!(frame, Frame::Runtime { .. })) else {
        return;
    };
    for frame in &mut frames[..innermost_ruby] {
        if matches!(frame, Frame::Anonymous { .. }) {
            let function = functions.intern("[YJIT code: not read]", "", 0, SymbolKind::Jit, Some(LANGUAGE));
            *frame = Frame::Runtime { function: function.id, line: 0 };
        }
    }
}

/// The frame that says what a thread did besides running its frames, by its record's flags
/// (`pc_flags`), counted in `stats`; `None` for a frame's record.
fn thread_state(pc_flags: u64, stats: &mut RubyStats) -> Option<&'static str> {
    if pc_flags & ruby_frame_flags::THREAD_STATE == 0 {
        return None;
    }
    match pc_flags >> ruby_frame_flags::THREAD_STATE_SHIFT {
        thread_states::IN_GC => {
            stats.in_gc += 1;
            Some("[Ruby GC]")
        }
        thread_states::WAITING_FOR_GVL => {
            stats.waiting_for_gvl += 1;
            Some("[waiting for the GVL]")
        }
        _ => Some("[Ruby, in an unknown state]"),
    }
}

/// glibc's `tcbhead_t.dtv`, and the size of a DTV entry (`dtv_t`: the block, and whether it is
/// static).
const DTV_IN_TCB: u64 = 8;
const DTV_ENTRY_BYTES: u64 = 16;
const MAX_TLS_MODULES: u64 = 1 << 16;
/// The static TLS area is below the thread pointer, and smaller than this.
const MAX_STATIC_TLS: i64 = 1 << 20;

impl Running {
    /// The frame a record stands for.
    fn frame(&mut self, record: &RubyFrame, functions: &mut Functions, stats: &mut RubyStats) -> Frame {
        let pc = record.pc_flags & !ruby_frame_flags::MASK;
        let key = (record.iseq, record.method, pc);
        if let Some((frame, _)) = self.frames.get(&key) {
            return *frame;
        }
        let (frame, function) = match self.named(record, functions) {
            Some(named) => {
                let line = named.iseq.as_ref().map_or(0, |iseq| iseq.line(pc).unwrap_or(iseq.first_line));
                (Frame::Runtime { function: named.function.id, line }, named.function)
            }
            None if self.memory.allowance_spent() => {
                stats.deferred += 1;
                let function =
                    functions.intern("[Ruby code not read yet]", "", 0, SymbolKind::Script, Some(LANGUAGE));
                return Frame::Runtime { function: function.id, line: 0 };
            }
            None => {
                stats.unreadable += 1;
                let function =
                    functions.intern("[unknown Ruby code]", "", 0, SymbolKind::Script, Some(LANGUAGE));
                (Frame::Runtime { function: function.id, line: 0 }, function)
            }
        };
        if function.is_kept() {
            self.frames.insert(key, (frame, function), ENTRY_BYTES);
        }
        frame
    }

    /// What the instruction sequence and method entry of `record` name.
    fn named(&mut self, record: &RubyFrame, functions: &mut Functions) -> Option<Named> {
        let key = (record.iseq, record.method);
        if let Some(known) = self.names.get(&key) {
            return known.clone();
        }
        let layout: &Layout = self.vm.layout;
        let memory = &mut self.memory;
        let mut read = |addr: u64, buf: &mut [u8]| {
            if memory.read(addr, buf) { Ok(()) } else { Err(anyhow!("{addr:#x} could not be read")) }
        };
        let iseq = match record.iseq {
            0 => None,
            address => read_iseq(&mut read, layout, address).ok(),
        };
        let method: Option<Method> = match record.method {
            0 => None,
            address => read_method(&mut read, layout, self.global_symbols, address).ok(),
        };
        let named = (iseq.is_some() || (record.iseq == 0 && method.is_some())).then(|| {
            let name = full_label(iseq.as_ref(), method.as_ref());
            let file = iseq.as_ref().map_or("", |iseq| iseq.path.as_str());
            Named {
                function: functions.intern(&name, file, 0, SymbolKind::Script, Some(LANGUAGE)),
                iseq: iseq.map(Arc::new),
            }
        });
        // A read refused for want of the sample's allowance says nothing of the objects, nor
        // does a name the budget had no room for.
        let unkept = named.as_ref().is_some_and(|named| !named.function.is_kept());
        if (named.is_some() || !self.memory.allowance_spent()) && !unkept {
            let bytes =
                named.as_ref().and_then(|named| named.iseq.as_ref()).map_or(0, |iseq| iseq.size() as u64);
            self.names.insert(key, named.clone(), bytes + ENTRY_BYTES);
        }
        named
    }
}
