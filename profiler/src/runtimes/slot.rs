//! The life of one runtime in the processes sampled, the same for every runtime: when a process
//! is looked at (again), what was recognised of each module, the state of each process (none
//! of its images mapped, starting, refused, running), and what the summary says of those not
//! read.
use std::{collections::BTreeMap, sync::Arc};

use profiler_common::runtimes::RuntimeKind;
use rustc_hash::{FxHashMap, FxHashSet};

use super::{MAX_REFUSED_NAMED, Refusal, Runtime, Shared, functions::Functions};
use crate::{
    address_space::{Mapping, ModuleId, ProcessView},
    decode::{RuntimeFrames, UserRegs},
    frame::Frame,
    model::Tgid,
    unwind::RuntimeCode,
};

/// Files of a process looked at for a runtime's image at most, at each look.
const MAX_CANDIDATES: usize = 16;
/// How long a runtime still starting is looked at every [`Runtime::RECHECK_NS`]; ten times
/// less often after that.
const SLOW_START_NS: u64 = 1_000_000_000;
/// How long a runtime may take to start before it is given up on.
const START_TIMEOUT_NS: u64 = 60_000_000_000;
/// How long after its first look a process is young: a runtime may be starting in it (its
/// library being mapped by the loader, its globals set), and it is looked at again every
/// [`YOUNG_RECHECK_NS`] rather than every [`Runtime::RECHECK_NS`], with the ring drained
/// faster meanwhile: an interpreter runs its first functions a few milliseconds after exec,
/// and what the kernel samples before it is told of them is native only.
pub(super) const YOUNG_NS: u64 = 50_000_000;
const YOUNG_RECHECK_NS: u64 = 1_000_000;

/// A runtime behind the interface [`super::Runtimes`] calls, whatever its types.
pub(super) trait Slot: Send {
    fn kind(&self) -> RuntimeKind;
    fn observe(&mut self, view: &mut ProcessView<'_>, time_ns: u64, shared: &mut Shared);
    fn expect(&mut self, view: &mut ProcessView<'_>, file: &Mapping);
    fn stepper(&mut self, tgid: Tgid, time_ns: u64, regs: &UserRegs) -> Option<&mut dyn RuntimeCode>;
    fn push_frames(
        &mut self,
        tgid: Tgid,
        depth: usize,
        functions: &mut Functions,
        frames: &mut Vec<Frame>,
    ) -> bool;
    fn merge(
        &mut self,
        tgid: Tgid,
        sample: RuntimeFrames<'_>,
        frames: &mut Vec<Frame>,
        functions: &mut Functions,
    );
    fn forget(&mut self, tgid: Tgid, shared: &mut Shared);
    fn refused_by_kernel(&mut self, tgid: Tgid, why: &anyhow::Error, shared: &mut Shared);
    fn pins(&self, module: ModuleId) -> bool;
    fn forget_modules(&mut self, modules: &[ModuleId]);
    fn relieve(&mut self);
    fn describe(&self) -> (&'static str, Vec<String>);
    fn inspect(
        &mut self,
        view: &mut ProcessView<'_>,
        shared: &mut Shared,
    ) -> Option<(&'static str, Result<String, String>)>;
}

/// A runtime, what it recognised of modules, and its state in each process.
pub(super) struct Loaded<R: Runtime> {
    runtime: R,
    images: FxHashMap<ModuleId, Recognised<R::Image>>,
    processes: FxHashMap<Tgid, State<R::Instance>>,
    /// Processes whose runtime is not read, and why (the first [`MAX_REFUSED_NAMED`]).
    refused: BTreeMap<Tgid, String>,
}

/// What a module is to a runtime.
enum Recognised<I> {
    Mine(Arc<I>),
    NotMine,
    /// One of its images, which it does not read: what it is.
    Refused(String),
}

impl<I> Clone for Recognised<I> {
    fn clone(&self) -> Self {
        match self {
            Self::Mine(image) => Self::Mine(image.clone()),
            Self::NotMine => Self::NotMine,
            Self::Refused(what) => Self::Refused(what.clone()),
        }
    }
}

/// A runtime in a process.
enum State<I> {
    /// None of its images mapped when last looked at (or no room in the kernel's table).
    Absent {
        first_ns: u64,
        checked_ns: u64,
    },
    /// Not ready when last looked at, and why.
    Starting {
        first_ns: u64,
        checked_ns: u64,
        why: String,
    },
    /// Not read: native frames only.
    Refused,
    Running(Box<Attached<I>>),
}

struct Attached<I> {
    instance: I,
    /// Its user, whose share of the kernel's table it holds when `registered`.
    uid: Option<u32>,
    registered: bool,
}

impl<R: Runtime> Loaded<R> {
    pub(super) fn boxed(runtime: R) -> Box<dyn Slot> {
        Box::new(Self {
            runtime,
            images: FxHashMap::default(),
            processes: FxHashMap::default(),
            refused: BTreeMap::new(),
        })
    }

    fn running(&mut self, tgid: Tgid) -> Option<&mut Attached<R::Instance>> {
        match self.processes.get_mut(&tgid) {
            Some(State::Running(attached)) => Some(attached),
            _ => None,
        }
    }

    fn refuse(&mut self, tgid: Tgid, why: String) -> State<R::Instance> {
        if self.refused.len() < MAX_REFUSED_NAMED {
            self.refused.insert(tgid, why);
        }
        State::Refused
    }

    /// Looks among the process's mappings that may be the runtime's images (the first
    /// [`MAX_CANDIDATES`] files, each once, however many the process maps) for one it reads.
    fn look(
        &mut self,
        view: &mut ProcessView<'_>,
        time_ns: u64,
        first_ns: u64,
        shared: &mut Shared,
    ) -> State<R::Instance> {
        let mut files = FxHashSet::default();
        let candidates: Vec<Mapping> = view
            .mappings()
            .filter(|mapping| self.runtime.may_be_image(mapping))
            .filter(|mapping| files.insert((mapping.dev, mapping.inode)))
            .take(MAX_CANDIDATES)
            .cloned()
            .collect();
        for mapping in candidates {
            let Some(module) = view.intern(&mapping) else { continue };
            match self.recognised(view, module) {
                Recognised::NotMine => {}
                Recognised::Refused(what) => return self.refuse(view.tgid(), what),
                Recognised::Mine(image) => {
                    return self.attach(view, &image, module, &mapping, time_ns, first_ns, shared);
                }
            }
        }
        State::Absent { first_ns, checked_ns: time_ns }
    }

    /// What `module` is to this runtime, recognised once.
    fn recognised(&mut self, view: &ProcessView<'_>, module: ModuleId) -> Recognised<R::Image> {
        if let Some(known) = self.images.get(&module) {
            return known.clone();
        }
        let recognised = match self.runtime.recognise(view, module) {
            Ok(Some(image)) => Recognised::Mine(Arc::new(image)),
            Ok(None) => Recognised::NotMine,
            Err(what) => Recognised::Refused(format!("{what:#}")),
        };
        self.images.insert(module, recognised.clone());
        recognised
    }

    #[allow(clippy::too_many_arguments)]
    fn attach(
        &mut self,
        view: &mut ProcessView<'_>,
        image: &Arc<R::Image>,
        module: ModuleId,
        mapping: &Mapping,
        time_ns: u64,
        first_ns: u64,
        shared: &mut Shared,
    ) -> State<R::Instance> {
        let tgid = view.tgid();
        match self.runtime.attach(view, image, module, mapping, &shared.allowance) {
            Ok(instance) => {
                let uid = view.identity().user;
                let process = self.runtime.kernel_process(&instance);
                if process.is_some() {
                    if !shared.table.take(uid) {
                        // Looked at again later, when there may be room.
                        self.runtime.detach(instance);
                        return State::Absent { first_ns, checked_ns: time_ns };
                    }
                    shared.kernel_updates.push((tgid, process));
                }
                State::Running(Box::new(Attached { instance, uid, registered: process.is_some() }))
            }
            Err(Refusal::NotYet(why)) if time_ns < first_ns.saturating_add(START_TIMEOUT_NS) => {
                State::Starting { first_ns, checked_ns: time_ns, why: format!("{why:#}") }
            }
            Err(Refusal::NotYet(why) | Refusal::Never(why)) => self.refuse(tgid, format!("{why:#}")),
        }
    }

    /// Lets go of a process's runtime: its place in the kernel's table too.
    fn release(&mut self, tgid: Tgid, attached: Attached<R::Instance>, shared: &mut Shared) {
        if attached.registered {
            shared.table.give_back(attached.uid);
            shared.kernel_updates.push((tgid, None));
        }
        self.runtime.detach(attached.instance);
    }
}

impl<R: Runtime> Slot for Loaded<R> {
    fn kind(&self) -> RuntimeKind {
        R::KIND
    }

    fn observe(&mut self, view: &mut ProcessView<'_>, time_ns: u64, shared: &mut Shared) {
        let tgid = view.tgid();
        let (first_ns, checked_ns, every) = match self.processes.get(&tgid) {
            Some(State::Refused | State::Running(_)) => return,
            None => (time_ns, 0, 0),
            Some(&State::Absent { first_ns, checked_ns }) => (first_ns, checked_ns, R::RECHECK_NS),
            // Each look at a runtime still starting may read much of it again: less often after
            // a while (most are ready in a fraction of a second).
            Some(&State::Starting { first_ns, checked_ns, .. }) => {
                let slow = time_ns.saturating_sub(first_ns) > SLOW_START_NS;
                (first_ns, checked_ns, if slow { 10 * R::RECHECK_NS } else { R::RECHECK_NS })
            }
        };
        let young = time_ns.saturating_sub(first_ns) < YOUNG_NS;
        let every = if young { every.min(YOUNG_RECHECK_NS) } else { every };
        if time_ns < checked_ns.saturating_add(every) {
            return;
        }
        let state = self.look(view, time_ns, first_ns, shared);
        if matches!(state, State::Absent { .. } | State::Starting { .. }) {
            shared.young_until_ns = shared.young_until_ns.max(first_ns.saturating_add(YOUNG_NS));
        }
        self.processes.insert(tgid, state);
    }

    fn expect(&mut self, view: &mut ProcessView<'_>, file: &Mapping) {
        if self.runtime.may_be_image(file)
            && let Some(module) = view.intern(file)
        {
            self.recognised(view, module);
        }
    }

    fn stepper(&mut self, tgid: Tgid, time_ns: u64, regs: &UserRegs) -> Option<&mut dyn RuntimeCode> {
        let Some(State::Running(attached)) = self.processes.get_mut(&tgid) else { return None };
        self.runtime.stepper(&mut attached.instance, time_ns, regs)
    }

    fn push_frames(
        &mut self,
        tgid: Tgid,
        depth: usize,
        functions: &mut Functions,
        frames: &mut Vec<Frame>,
    ) -> bool {
        let Some(State::Running(attached)) = self.processes.get_mut(&tgid) else { return false };
        self.runtime.push_frames(&mut attached.instance, depth, functions, frames)
    }

    fn merge(
        &mut self,
        tgid: Tgid,
        sample: RuntimeFrames<'_>,
        frames: &mut Vec<Frame>,
        functions: &mut Functions,
    ) {
        let Some(State::Running(attached)) = self.processes.get_mut(&tgid) else { return };
        self.runtime.merge(&mut attached.instance, sample, frames, functions);
    }

    fn forget(&mut self, tgid: Tgid, shared: &mut Shared) {
        if let Some(State::Running(attached)) = self.processes.remove(&tgid) {
            self.release(tgid, *attached, shared);
        }
    }

    fn refused_by_kernel(&mut self, tgid: Tgid, why: &anyhow::Error, shared: &mut Shared) {
        // A process forgotten since is another's pid by now.
        if !self.running(tgid).is_some_and(|attached| attached.registered) {
            return;
        }
        let refused = self.refuse(tgid, format!("the kernel refused its {} frames ({why:#})", R::LABEL));
        if let Some(State::Running(attached)) = self.processes.insert(tgid, refused) {
            self.release(tgid, *attached, shared);
        }
    }

    fn pins(&self, module: ModuleId) -> bool {
        self.processes.values().any(|state| {
            matches!(state, State::Running(attached) if self.runtime.pinned_module(&attached.instance) == Some(module))
        })
    }

    fn forget_modules(&mut self, modules: &[ModuleId]) {
        for module in modules {
            self.images.remove(module);
        }
    }

    fn relieve(&mut self) {
        for state in self.processes.values_mut() {
            if let State::Running(attached) = state {
                self.runtime.relieve(&mut attached.instance);
            }
        }
    }

    fn inspect(
        &mut self,
        view: &mut ProcessView<'_>,
        shared: &mut Shared,
    ) -> Option<(&'static str, Result<String, String>)> {
        let tgid = view.tgid();
        let found = match self.look(view, 0, 0, shared) {
            State::Absent { .. } => return None,
            State::Running(attached) => {
                let said = self.runtime.inspect(&attached.instance);
                self.release(tgid, *attached, shared);
                Ok(said)
            }
            State::Starting { why, .. } => Err(why),
            State::Refused => Err(self.refused.remove(&tgid).unwrap_or_default()),
        };
        Some((R::NAME, found))
    }

    fn describe(&self) -> (&'static str, Vec<String>) {
        let mut running = self.processes.values().filter_map(|state| match state {
            State::Running(attached) => Some(&attached.instance),
            _ => None,
        });
        let mut lines = self.runtime.describe(&mut running);
        let starting = self.processes.iter().filter_map(|(tgid, state)| match state {
            State::Starting { why, .. } => Some((tgid, format!("{why} (still so at the end)"))),
            _ => None,
        });
        let refused = self.refused.iter().map(|(tgid, why)| (tgid, why.clone()));
        let mut not_read: Vec<_> = refused.chain(starting).collect();
        not_read.sort_by_key(|(tgid, _)| **tgid);
        not_read.truncate(MAX_REFUSED_NAMED);
        lines
            .extend(not_read.into_iter().map(|(tgid, why)| format!("pid {tgid}: {why}: native frames only")));
        (R::LABEL, lines)
    }
}

#[cfg(test)]
mod tests {
    use std::{
        path::Path,
        sync::atomic::{AtomicUsize, Ordering},
    };

    use profiler_common::runtimes::{RUNTIME_PROCESS_WORDS, RUNTIME_USER_SHARE, RuntimeProcess};

    use super::*;
    use crate::{
        address_space::{AddressSpaces, Backing, Tracking},
        runtimes::{kernel_table::KernelTable, memory::Allowance},
    };

    /// A runtime whose image is this test's own executable, attaching as `attach` says.
    struct Fake {
        attach: fn() -> Result<(), Refusal>,
        walked_in_kernel: bool,
    }

    impl Runtime for Fake {
        type Image = ();
        type Instance = ();

        const LABEL: &'static str = "fake";
        const NAME: &'static str = "Fake";
        const RECHECK_NS: u64 = 2 * YOUNG_NS;

        fn may_be_image(&self, mapping: &Mapping) -> bool {
            let own = std::env::current_exe().unwrap();
            matches!(&mapping.backing, Backing::File { path, .. } if *path == own) && mapping.executable
        }

        fn recognise(&mut self, _: &ProcessView<'_>, _: ModuleId) -> anyhow::Result<Option<()>> {
            Ok(Some(()))
        }

        fn attach(
            &mut self,
            _: &mut ProcessView<'_>,
            _: &Arc<()>,
            _: ModuleId,
            _: &Mapping,
            _: &Arc<Allowance>,
        ) -> Result<(), Refusal> {
            (self.attach)()
        }

        fn kernel_process(&self, _: &()) -> Option<RuntimeProcess> {
            self.walked_in_kernel.then_some(RuntimeProcess {
                kind: 1,
                _pad: [0; 3],
                data: [0; RUNTIME_PROCESS_WORDS],
            })
        }

        fn relieve(&mut self, _: &mut ()) {}

        fn inspect(&self, _: &()) -> String {
            "read".into()
        }

        fn describe(&self, running: &mut dyn Iterator<Item = &()>) -> Vec<String> {
            vec![format!("{} running", running.count())]
        }
    }

    fn shared(system_wide: bool) -> Shared {
        Shared {
            allowance: Arc::new(Allowance::default()),
            table: KernelTable::new(system_wide),
            kernel_updates: Vec::new(),
            young_until_ns: 0,
        }
    }

    /// Looks at this process at `time_ns` with `slot`.
    fn observe(slot: &mut Box<dyn Slot>, shared: &mut Shared, time_ns: u64) {
        let mut spaces = AddressSpaces::new(Tracking { all: false, follow_forks: false });
        spaces.track(Tgid::own());
        let mut view =
            spaces.observe(Tgid::own(), Tgid::own().main_thread(), "", crate::clock::monotonic_ns());
        slot.observe(&mut view, time_ns, shared);
    }

    #[test]
    fn a_runtime_still_starting_is_looked_at_again_then_given_up_on() {
        let fake =
            Fake { attach: || Err(Refusal::NotYet(anyhow::anyhow!("not started"))), walked_in_kernel: false };
        let (mut slot, mut shared) = (Loaded::boxed(fake), shared(false));
        observe(&mut slot, &mut shared, 1);
        let starting = format!("pid {}: not started (still so at the end): native frames only", Tgid::own());
        assert_eq!(slot.describe().1, ["0 running".to_owned(), starting]);
        observe(&mut slot, &mut shared, 1 + START_TIMEOUT_NS);
        let refused = format!("pid {}: not started: native frames only", Tgid::own());
        assert_eq!(slot.describe().1, ["0 running".to_owned(), refused], "given up on");
    }

    /// A command's program, expected before it runs, is recognised then: its first look finds
    /// the same module read, and only attaches.
    #[test]
    fn an_image_expected_before_its_process_runs_is_recognised_then() {
        let fake = Fake { attach: || Ok(()), walked_in_kernel: false };
        let mut slot = Loaded {
            runtime: fake,
            images: FxHashMap::default(),
            processes: FxHashMap::default(),
            refused: BTreeMap::new(),
        };
        let mut shared = shared(false);
        let mut spaces = AddressSpaces::new(Tracking { all: false, follow_forks: false });
        spaces.track(Tgid::own());
        let mut view = spaces.view(Tgid::own(), crate::clock::monotonic_ns()).unwrap();
        let other = Path::new("/bin/sh");
        slot.expect(&mut view, &Mapping::whole_file(other, &std::fs::metadata(other).unwrap()));
        assert!(slot.images.is_empty(), "not a file the runtime may read");
        let exe = std::env::current_exe().unwrap();
        slot.expect(&mut view, &Mapping::whole_file(&exe, &std::fs::metadata(&exe).unwrap()));
        assert!(matches!(slot.images.values().collect::<Vec<_>>()[..], [Recognised::Mine(_)]));
        assert!(slot.processes.is_empty(), "no process looked at yet");
        slot.observe(&mut view, 1, &mut shared);
        assert_eq!(slot.images.len(), 1, "the module mapped is the one recognised");
        assert_eq!(slot.describe().1, ["1 running"]);
    }

    static YOUNG_LOOKS: AtomicUsize = AtomicUsize::new(0);

    #[test]
    fn a_young_process_is_looked_at_again_sooner_and_drained_for() {
        let not_yet = || {
            YOUNG_LOOKS.fetch_add(1, Ordering::Relaxed);
            Err(Refusal::NotYet(anyhow::anyhow!("not started")))
        };
        let (mut slot, mut shared) =
            (Loaded::boxed(Fake { attach: not_yet, walked_in_kernel: false }), shared(false));
        let looks = |slot: &mut Box<dyn Slot>, shared: &mut Shared, time_ns| {
            observe(slot, shared, time_ns);
            YOUNG_LOOKS.load(Ordering::Relaxed)
        };
        assert_eq!(looks(&mut slot, &mut shared, 1), 1);
        assert_eq!(shared.young_until_ns, 1 + YOUNG_NS, "the ring drained sooner while it is young");
        assert_eq!(looks(&mut slot, &mut shared, YOUNG_RECHECK_NS), 1, "not looked at twice at once");
        assert_eq!(looks(&mut slot, &mut shared, 1 + YOUNG_RECHECK_NS), 2, "looked at again soon");
        assert_eq!(looks(&mut slot, &mut shared, 2 + YOUNG_NS), 2, "no longer young");
        assert_eq!(looks(&mut slot, &mut shared, 1 + YOUNG_RECHECK_NS + Fake::RECHECK_NS), 3);
        assert_eq!(shared.young_until_ns, 1 + YOUNG_NS);
    }

    #[test]
    fn a_runtime_walked_in_the_kernel_holds_a_place_until_forgotten() {
        let fake = Fake { attach: || Ok(()), walked_in_kernel: true };
        let (mut slot, mut shared) = (Loaded::boxed(fake), shared(true));
        observe(&mut slot, &mut shared, 1);
        assert_eq!(slot.describe().1, ["1 running"]);
        assert!(matches!(shared.kernel_updates[..], [(tgid, Some(_))] if tgid == Tgid::own()));
        slot.forget(Tgid::own(), &mut shared);
        assert!(
            matches!(shared.kernel_updates[1..], [(tgid, None)] if tgid == Tgid::own()),
            "the kernel told"
        );
        assert_eq!(slot.describe().1, ["0 running"]);
    }

    #[test]
    fn no_place_in_the_kernels_table_means_later() {
        let fake = Fake { attach: || Ok(()), walked_in_kernel: true };
        let (mut slot, mut shared) = (Loaded::boxed(fake), shared(true));
        let user = Some(0);
        for _ in 0..RUNTIME_USER_SHARE {
            assert!(shared.table.take(user));
        }
        observe(&mut slot, &mut shared, 1);
        assert!(
            shared.kernel_updates.is_empty() && slot.describe().1 == ["0 running"],
            "over its user's share"
        );
        shared.table.give_back(user);
        observe(&mut slot, &mut shared, 2);
        assert_eq!(slot.describe().1, ["0 running"], "not before its re-check");
        observe(&mut slot, &mut shared, 2 + Fake::RECHECK_NS);
        assert_eq!(slot.describe().1, ["1 running"], "room again");
    }

    #[test]
    fn a_refusal_of_the_kernel_lets_the_process_go() {
        let fake = Fake { attach: || Ok(()), walked_in_kernel: true };
        let (mut slot, mut shared) = (Loaded::boxed(fake), shared(false));
        observe(&mut slot, &mut shared, 1);
        slot.refused_by_kernel(Tgid::own(), &anyhow::anyhow!("map full"), &mut shared);
        let said =
            format!("pid {}: the kernel refused its fake frames (map full): native frames only", Tgid::own());
        assert_eq!(slot.describe().1, ["0 running".to_owned(), said]);
        assert!(matches!(shared.kernel_updates[1..], [(_, None)]));
    }
}
