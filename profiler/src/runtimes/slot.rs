//! The life of one runtime in the processes sampled, the same for every runtime: attaching to
//! a process once discovery finds its image there (see `discovery`), a runtime still starting
//! looked at again, refused, running; and what the summary says of those not read.
use std::{collections::BTreeMap, sync::Arc};

use profiler_common::runtimes::RuntimeKind;
use rustc_hash::{FxHashMap, FxHashSet};

use super::{MAX_REFUSED_NAMED, Refusal, Runtime, Shared, discovery::Recognised, functions::Functions};
use crate::{
    address_space::{Mapping, ModuleId, ProcessView},
    decode::{RuntimeFrames, UserRegs},
    frame::Frame,
    model::{LabelSet, Tgid},
    unwind::RuntimeCode,
};

/// How long a runtime still starting is looked at every [`Runtime::RECHECK_NS`]; ten times
/// less often after that.
const SLOW_START_NS: u64 = 1_000_000_000;
/// How long a runtime may take to start before it is given up on.
const START_TIMEOUT_NS: u64 = 60_000_000_000;
/// How long after it was found a runtime still starting is looked at again every
/// [`YOUNG_RECHECK_NS`] rather than every [`Runtime::RECHECK_NS`]: an interpreter runs its first
/// functions a few milliseconds after exec, and what the kernel samples before it is told of
/// them is native only.
const YOUNG_NS: u64 = super::discovery::YOUNG_NS;
const YOUNG_RECHECK_NS: u64 = 1_000_000;

/// A runtime behind the interface [`super::Runtimes`] calls, whatever its types.
pub(super) trait Slot: Send {
    fn kind(&self) -> RuntimeKind;
    /// Its image, as `recognised`, found in the process of `view` at `mapping`: attached to,
    /// refused, or left starting; false when its file could not be opened now (found again
    /// later).
    fn found(
        &mut self,
        view: &mut ProcessView<'_>,
        mapping: &Mapping,
        recognised: &Recognised,
        time_ns: u64,
        shared: &mut Shared,
    ) -> bool;
    /// A sample of the process of `view`: a runtime still starting in it is looked at again
    /// when it is time to.
    fn observe(&mut self, view: &mut ProcessView<'_>, time_ns: u64, shared: &mut Shared);
    fn stepper(
        &mut self,
        tgid: Tgid,
        time_ns: u64,
        regs: &UserRegs,
        sample: RuntimeFrames<'_>,
    ) -> Option<&mut dyn RuntimeCode>;
    fn push_frames(
        &mut self,
        tgid: Tgid,
        depth: usize,
        addr: u64,
        functions: &mut Functions,
        frames: &mut Vec<Frame>,
    ) -> bool;
    fn ends_stack(&mut self, tgid: Tgid, depth: usize, addr: u64) -> bool;
    fn merge(
        &mut self,
        tgid: Tgid,
        sample: RuntimeFrames<'_>,
        frames: &mut Vec<Frame>,
        labels: &mut LabelSet,
        functions: &mut Functions,
    );
    fn forget(&mut self, tgid: Tgid, shared: &mut Shared);
    fn refused_by_kernel(&mut self, tgid: Tgid, why: &anyhow::Error, shared: &mut Shared);
    /// Adds the modules its running processes' frames are recognised by to `pinned`.
    fn pinned(&self, pinned: &mut FxHashSet<ModuleId>);
    fn relieve(&mut self);
    fn describe(&self) -> (&'static str, Vec<String>);
    /// What `profiler check` says of its image found in the process of `view`; nothing is left
    /// attached.
    fn inspect(
        &mut self,
        view: &mut ProcessView<'_>,
        mapping: &Mapping,
        recognised: &Recognised,
        shared: &mut Shared,
    ) -> (&'static str, Result<String, String>);
}

/// A runtime, and its state in each process that maps one of its images.
pub(super) struct Loaded<R: Runtime> {
    runtime: R,
    processes: FxHashMap<Tgid, State<R::Image, R::Instance>>,
    /// Processes whose runtime is not read, and why (the first [`MAX_REFUSED_NAMED`]).
    refused: BTreeMap<Tgid, String>,
}

/// One of a runtime's images, where a process maps it.
struct ImageAt<I> {
    image: Arc<I>,
    module: ModuleId,
    mapping: Mapping,
}

/// A runtime in a process.
enum State<I, P> {
    /// Not ready when last looked at, and why.
    Starting {
        at: ImageAt<I>,
        first_ns: u64,
        checked_ns: u64,
        why: String,
    },
    /// Ready, but the kernel's table had no room for it when last looked at.
    NoRoom {
        at: ImageAt<I>,
        checked_ns: u64,
    },
    /// Not read: native frames only.
    Refused,
    Running(Box<Attached<P>>),
}

struct Attached<P> {
    instance: P,
    /// Its user, whose share of the kernel's table it holds when `registered`.
    uid: Option<u32>,
    registered: bool,
}

impl<R: Runtime> Loaded<R> {
    pub(super) fn boxed(runtime: R) -> Box<dyn Slot> {
        Box::new(Self { runtime, processes: FxHashMap::default(), refused: BTreeMap::new() })
    }

    fn running(&mut self, tgid: Tgid) -> Option<&mut Attached<R::Instance>> {
        match self.processes.get_mut(&tgid) {
            Some(State::Running(attached)) => Some(attached),
            _ => None,
        }
    }

    fn refuse(&mut self, tgid: Tgid, why: String) -> State<R::Image, R::Instance> {
        if self.refused.len() < MAX_REFUSED_NAMED {
            self.refused.insert(tgid, why);
        }
        State::Refused
    }

    /// Attaches to the process of `view` at `at`, first found at `first_ns`.
    fn attach(
        &mut self,
        view: &mut ProcessView<'_>,
        at: ImageAt<R::Image>,
        time_ns: u64,
        first_ns: u64,
        shared: &mut Shared,
    ) -> State<R::Image, R::Instance> {
        let tgid = view.tgid();
        // What the runtime reads of the process may be in its image's data, or in files it
        // mapped since, which no task event reported.
        if view.maps_stale() {
            view.read_maps();
            shared.allowance.begin(view.file_pages());
        }
        match self.runtime.attach(view, &at.image, at.module, &at.mapping, &shared.allowance) {
            Ok(instance) => {
                let uid = view.identity().user;
                let process = self.runtime.kernel_process(&instance);
                if process.is_some() {
                    if !shared.table.take(uid) {
                        // Looked at again later, when there may be room.
                        self.runtime.detach(instance);
                        return State::NoRoom { at, checked_ns: time_ns };
                    }
                    shared.kernel_updates.push((tgid, process));
                }
                State::Running(Box::new(Attached { instance, uid, registered: process.is_some() }))
            }
            Err(Refusal::NotYet(why)) if time_ns < first_ns.saturating_add(START_TIMEOUT_NS) => {
                State::Starting { at, first_ns, checked_ns: time_ns, why: format!("{why:#}") }
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

    fn found(
        &mut self,
        view: &mut ProcessView<'_>,
        mapping: &Mapping,
        recognised: &Recognised,
        time_ns: u64,
        shared: &mut Shared,
    ) -> bool {
        let tgid = view.tgid();
        if self.processes.contains_key(&tgid) {
            return true;
        }
        let image = match recognised {
            Ok(image) => match Arc::clone(image).downcast::<R::Image>() {
                Ok(image) => image,
                Err(_) => return true,
            },
            Err(what) => {
                let refused = self.refuse(tgid, what.clone());
                self.processes.insert(tgid, refused);
                return true;
            }
        };
        let Some(module) = view.intern(mapping) else { return false };
        let at = ImageAt { image, module, mapping: mapping.clone() };
        let state = self.attach(view, at, time_ns, time_ns, shared);
        self.processes.insert(tgid, state);
        true
    }

    fn observe(&mut self, view: &mut ProcessView<'_>, time_ns: u64, shared: &mut Shared) {
        let tgid = view.tgid();
        let (first_ns, checked_ns, every) = match self.processes.get(&tgid) {
            // Each look at a runtime still starting may read much of it again: less often after
            // a while (most are ready in a fraction of a second), more often at first.
            Some(&State::Starting { first_ns, checked_ns, .. }) => {
                let age = time_ns.saturating_sub(first_ns);
                let every = match age {
                    _ if age < YOUNG_NS => YOUNG_RECHECK_NS,
                    _ if age > SLOW_START_NS => 10 * R::RECHECK_NS,
                    _ => R::RECHECK_NS,
                };
                (first_ns, checked_ns, every)
            }
            Some(&State::NoRoom { checked_ns, .. }) => (time_ns, checked_ns, R::RECHECK_NS),
            _ => return,
        };
        if time_ns < checked_ns.saturating_add(every) {
            return;
        }
        let Some(State::Starting { at, .. } | State::NoRoom { at, .. }) = self.processes.remove(&tgid) else {
            return;
        };
        let state = self.attach(view, at, time_ns, first_ns, shared);
        self.processes.insert(tgid, state);
    }

    fn stepper(
        &mut self,
        tgid: Tgid,
        time_ns: u64,
        regs: &UserRegs,
        sample: RuntimeFrames<'_>,
    ) -> Option<&mut dyn RuntimeCode> {
        let Some(State::Running(attached)) = self.processes.get_mut(&tgid) else { return None };
        self.runtime.stepper(&mut attached.instance, time_ns, regs, sample)
    }

    fn push_frames(
        &mut self,
        tgid: Tgid,
        depth: usize,
        addr: u64,
        functions: &mut Functions,
        frames: &mut Vec<Frame>,
    ) -> bool {
        let Some(State::Running(attached)) = self.processes.get_mut(&tgid) else { return false };
        self.runtime.push_frames(&mut attached.instance, depth, addr, functions, frames)
    }

    fn ends_stack(&mut self, tgid: Tgid, depth: usize, addr: u64) -> bool {
        let Some(State::Running(attached)) = self.processes.get_mut(&tgid) else { return false };
        self.runtime.ends_stack(&mut attached.instance, depth, addr)
    }

    fn merge(
        &mut self,
        tgid: Tgid,
        sample: RuntimeFrames<'_>,
        frames: &mut Vec<Frame>,
        labels: &mut LabelSet,
        functions: &mut Functions,
    ) {
        let Some(State::Running(attached)) = self.processes.get_mut(&tgid) else { return };
        self.runtime.merge(&mut attached.instance, sample, frames, labels, functions);
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

    fn pinned(&self, pinned: &mut FxHashSet<ModuleId>) {
        let running = self.processes.values().filter_map(|state| match state {
            State::Running(attached) => self.runtime.pinned_module(&attached.instance),
            _ => None,
        });
        pinned.extend(running);
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
        mapping: &Mapping,
        recognised: &Recognised,
        shared: &mut Shared,
    ) -> (&'static str, Result<String, String>) {
        let tgid = view.tgid();
        self.forget(tgid, shared);
        self.found(view, mapping, recognised, 0, shared);
        let said = match self.processes.remove(&tgid) {
            Some(State::Running(attached)) => {
                let said = self.runtime.inspect(&attached.instance);
                self.release(tgid, *attached, shared);
                Ok(said)
            }
            Some(State::Starting { why, .. }) => Err(why),
            Some(State::NoRoom { .. }) => Err("no room in the kernel's table of processes".into()),
            Some(State::Refused) => Err(self.refused.remove(&tgid).unwrap_or_default()),
            None => Err("its file could not be opened".into()),
        };
        (R::NAME, said)
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
    use std::sync::atomic::{AtomicUsize, Ordering};

    use profiler_common::runtimes::{RUNTIME_PROCESS_WORDS, RUNTIME_USER_SHARE, RuntimeProcess};

    use super::*;
    use crate::{
        address_space::{AddressSpaces, Backing, Tracking},
        runtimes::{ImageFile, Mark, kernel_table::KernelTable, memory::Allowance},
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

        fn marks(_: Mark<'_>) -> bool {
            false
        }

        fn recognise(_: &ImageFile<'_>) -> anyhow::Result<Option<()>> {
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

    /// Runs `run` on a view of this process.
    fn with_own_view(run: impl FnOnce(&mut ProcessView<'_>)) {
        let mut spaces = AddressSpaces::new(Tracking { all: false, follow_forks: false });
        spaces.track(Tgid::own());
        run(&mut spaces.view(Tgid::own(), crate::clock::monotonic_ns()).unwrap());
    }

    /// The fake's image, `recognised`, found in this process at `time_ns`.
    fn found(slot: &mut Box<dyn Slot>, shared: &mut Shared, recognised: Recognised, time_ns: u64) {
        let own = std::env::current_exe().unwrap();
        with_own_view(|view| {
            let image = view
                .mappings()
                .find(|m| m.executable && matches!(&m.backing, Backing::File { path, .. } if *path == own))
                .cloned()
                .unwrap();
            assert!(slot.found(view, &image, &recognised, time_ns, shared));
        });
    }

    fn observe(slot: &mut Box<dyn Slot>, shared: &mut Shared, time_ns: u64) {
        with_own_view(|view| slot.observe(view, time_ns, shared));
    }

    fn image() -> Recognised {
        Ok(Arc::new(()))
    }

    #[test]
    fn a_runtime_still_starting_is_looked_at_again_then_given_up_on() {
        let fake =
            Fake { attach: || Err(Refusal::NotYet(anyhow::anyhow!("not started"))), walked_in_kernel: false };
        let (mut slot, mut shared) = (Loaded::boxed(fake), shared(false));
        found(&mut slot, &mut shared, image(), 1);
        let starting = format!("pid {}: not started (still so at the end): native frames only", Tgid::own());
        assert_eq!(slot.describe().1, ["0 running".to_owned(), starting]);
        observe(&mut slot, &mut shared, 1 + START_TIMEOUT_NS);
        let refused = format!("pid {}: not started: native frames only", Tgid::own());
        assert_eq!(slot.describe().1, ["0 running".to_owned(), refused], "given up on");
    }

    #[test]
    fn an_image_its_runtime_does_not_read_is_said_once() {
        let fake = Fake { attach: || Ok(()), walked_in_kernel: false };
        let (mut slot, mut shared) = (Loaded::boxed(fake), shared(false));
        found(&mut slot, &mut shared, Err("Fake 9.9".into()), 1);
        found(&mut slot, &mut shared, image(), 2);
        let refused = format!("pid {}: Fake 9.9: native frames only", Tgid::own());
        assert_eq!(slot.describe().1, ["0 running".to_owned(), refused], "refused for as long as it runs it");
    }

    static YOUNG_LOOKS: AtomicUsize = AtomicUsize::new(0);

    #[test]
    fn a_young_runtime_still_starting_is_looked_at_again_sooner() {
        let not_yet = || {
            YOUNG_LOOKS.fetch_add(1, Ordering::Relaxed);
            Err(Refusal::NotYet(anyhow::anyhow!("not started")))
        };
        let (mut slot, mut shared) =
            (Loaded::boxed(Fake { attach: not_yet, walked_in_kernel: false }), shared(false));
        found(&mut slot, &mut shared, image(), 1);
        assert_eq!(YOUNG_LOOKS.load(Ordering::Relaxed), 1);
        let looks = |slot: &mut Box<dyn Slot>, shared: &mut Shared, time_ns| {
            observe(slot, shared, time_ns);
            YOUNG_LOOKS.load(Ordering::Relaxed)
        };
        assert_eq!(looks(&mut slot, &mut shared, YOUNG_RECHECK_NS), 1, "not looked at twice at once");
        assert_eq!(looks(&mut slot, &mut shared, 1 + YOUNG_RECHECK_NS), 2, "looked at again soon");
        assert_eq!(looks(&mut slot, &mut shared, YOUNG_NS), 3, "the last young look");
        assert_eq!(looks(&mut slot, &mut shared, 1 + YOUNG_NS), 3, "no longer young");
        assert_eq!(looks(&mut slot, &mut shared, YOUNG_NS + Fake::RECHECK_NS), 4);
    }

    #[test]
    fn a_runtime_walked_in_the_kernel_holds_a_place_until_forgotten() {
        let fake = Fake { attach: || Ok(()), walked_in_kernel: true };
        let (mut slot, mut shared) = (Loaded::boxed(fake), shared(true));
        found(&mut slot, &mut shared, image(), 1);
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
        let user = Some(rustix::process::getuid().as_raw());
        for _ in 0..RUNTIME_USER_SHARE {
            assert!(shared.table.take(user));
        }
        found(&mut slot, &mut shared, image(), 1);
        assert!(
            shared.kernel_updates.is_empty() && slot.describe().1 == ["0 running"],
            "over its user's share, and not said to be refused"
        );
        shared.table.give_back(user);
        observe(&mut slot, &mut shared, 2);
        assert_eq!(slot.describe().1, ["0 running"], "not before its re-check");
        observe(&mut slot, &mut shared, 1 + Fake::RECHECK_NS);
        assert_eq!(slot.describe().1, ["1 running"], "room again");
    }

    #[test]
    fn a_refusal_of_the_kernel_lets_the_process_go() {
        let fake = Fake { attach: || Ok(()), walked_in_kernel: true };
        let (mut slot, mut shared) = (Loaded::boxed(fake), shared(false));
        found(&mut slot, &mut shared, image(), 1);
        slot.refused_by_kernel(Tgid::own(), &anyhow::anyhow!("map full"), &mut shared);
        let said =
            format!("pid {}: the kernel refused its fake frames (map full): native frames only", Tgid::own());
        assert_eq!(slot.describe().1, ["0 running".to_owned(), said]);
        assert!(matches!(shared.kernel_updates[1..], [(_, None)]));
    }
}
