//! Discovery: which runtime a process runs, found from what the files it maps executable are,
//! whatever they are called (an extension module called `*.cpython-312-*.so` is no interpreter;
//! a renamed `python3.11`, or a server with libpython linked in, is one), with the reading of
//! files kept off the thread that drains samples.
//!
//! What each file is (by device and inode) is examined once ([`examine`]), on the worker thread
//! ([`worker`]), and kept in a cache under the budget of what targets describe (an image found
//! that the budget has no room for, in a small table of its own: else it would be examined
//! again and again, and its runtime never read). A process
//! is looked at when it is first sampled, when it runs exec or is forked from one looked at,
//! when its table of mappings is read again, and once per drain after it maps new files (its
//! task events). What a table of mappings holds is worked out once, and shared by the processes
//! that share the table (children forked from one with tens of thousands of mappings): each of
//! its files looked up, those not known yet queued for the worker. It is worked out again once
//! an answer finds an image, or, while some of its files could not be queued, every
//! [`RETRY_NS`]; meanwhile its processes' samples have native frames.
mod examine;
mod worker;

use std::{num::NonZeroUsize, sync::Arc};

use lru::LruCache;
use rustc_hash::{FxHashMap, FxHashSet};

pub(crate) use self::examine::{ImageFile, Mark, Recognised, Recogniser};
use self::{
    examine::{Examined, examine},
    worker::{Job, Worker},
};
use crate::{
    address_space::{Backing, Mapping, ProcessView},
    model::Tgid,
    untrusted::{Budget, Cache, DESCRIBED},
};

/// How long after a process is first looked at, or runs exec, it is young: a runtime may be
/// starting in it, and the session drains the ring every millisecond meanwhile, so that the
/// files it maps are looked at within a millisecond or two.
pub(super) const YOUNG_NS: u64 = 50_000_000;
/// How long a process waits before it is looked at again when some of its files are not known
/// yet: queued, or not (its user's queue full, or not readable through the process).
const RETRY_NS: u64 = 200_000_000;
/// Tables of mappings whose images are remembered, at most (least recently used first out).
const MAX_TABLES: usize = 4096;
/// Images kept beside the cache when its budget had no room for them, at most.
const MAX_UNKEPT_IMAGES: usize = 1024;

/// A file mapped executable, as a mapping names it: its device and inode (the names it goes by,
/// hard links, are one file). A file deleted and its inode given to another is the other file
/// only once what was found of the first goes unused for a minute, or for want of room.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct FileKey {
    dev: u64,
    inode: u64,
}

impl FileKey {
    fn of(mapping: &Mapping) -> Option<Self> {
        matches!(mapping.backing, Backing::File { .. })
            .then_some(Self { dev: mapping.dev, inode: mapping.inode })
    }
}

/// A runtime's image found in a process: by which runtime (its index), at which mapping, and
/// what the runtime made of it.
#[derive(Clone)]
pub(super) struct Found {
    pub slot: usize,
    pub mapping: Mapping,
    pub recognised: Recognised,
}

/// What discovery knows of files, tables of mappings and processes (the pipeline's side), and
/// its worker.
pub(super) struct Discovery {
    recognisers: Arc<[Box<dyn Recogniser>]>,
    worker: Worker,
    examined: Cache<FileKey, Examined>,
    /// Images found that the cache had no room for.
    unkept_images: LruCache<FileKey, Examined>,
    /// Files queued for the worker, and for whom: a file queued for one user is queued for
    /// another in turn, not left to wait behind the first one's queue.
    pending: FxHashSet<(FileKey, Option<u32>)>,
    /// What each table of mappings looked through holds.
    tables: LruCache<u64, TableLook>,
    /// Answers that found an image so far: tables looked through before the last one hold
    /// files that may be images, and are looked through again.
    images_found: u64,
    /// Processes looked at, and the table of mappings they were last looked at with.
    processes: FxHashMap<Tgid, Looked>,
    /// Processes to look at in the next drain, and later ones.
    stale: FxHashSet<Tgid>,
    retries: FxHashMap<Tgid, u64>,
    stats: Stats,
}

#[derive(Clone, Copy)]
struct Looked {
    /// The id of the table of mappings looked at (0: none yet).
    table: u64,
}

/// What a table of mappings was found to hold: the runtimes' images among its files, whether
/// every other file was known not to be one, and when.
struct TableLook {
    images: Vec<Found>,
    complete: bool,
    images_found: u64,
    looked_ns: u64,
}

/// What discovery did, for the summary.
#[derive(Default)]
struct Stats {
    /// Answers of the worker, the images among them, and files it gave up on.
    files: u64,
    images: u64,
    given_up: u64,
    /// Files left for later, their user's queue full, each time.
    left_for_later: u64,
}

impl Discovery {
    pub(super) fn new(recognisers: Vec<Box<dyn Recogniser>>) -> Self {
        Self::within(recognisers, &DESCRIBED)
    }

    /// What files are kept in `budget`.
    fn within(recognisers: Vec<Box<dyn Recogniser>>, budget: &'static Budget) -> Self {
        let recognisers: Arc<[Box<dyn Recogniser>]> = recognisers.into();
        Self {
            worker: Worker::new(recognisers.clone()),
            recognisers,
            examined: Cache::new(budget),
            unkept_images: LruCache::new(NonZeroUsize::new(MAX_UNKEPT_IMAGES).expect("not zero")),
            pending: FxHashSet::default(),
            tables: LruCache::new(NonZeroUsize::new(MAX_TABLES).expect("not zero")),
            images_found: 0,
            processes: FxHashMap::default(),
            stale: FxHashSet::default(),
            retries: FxHashMap::default(),
            stats: Stats::default(),
        }
    }

    /// A sample of the process of `view` at `time_ns`: looked at when it is new, or its table of
    /// mappings was read again (young from now when new, see [`YOUNG_NS`]).
    pub(super) fn observe(
        &mut self,
        view: &ProcessView<'_>,
        time_ns: u64,
        young_until_ns: &mut u64,
    ) -> Vec<Found> {
        match self.processes.get(&view.tgid()) {
            Some(looked) if looked.table == view.table() => Vec::new(),
            Some(_) => self.look(view, time_ns),
            None => {
                *young_until_ns = (*young_until_ns).max(time_ns.saturating_add(YOUNG_NS));
                self.look(view, time_ns)
            }
        }
    }

    /// Process `tgid` is about to run a command (held before its exec): looked at as soon as
    /// it maps files, and young.
    pub(super) fn follow(&mut self, tgid: Tgid, now_ns: u64, young_until_ns: &mut u64) {
        self.processes.insert(tgid, Looked { table: 0 });
        *young_until_ns = (*young_until_ns).max(now_ns.saturating_add(YOUNG_NS));
    }

    /// Process `pid` mapped a file executable: looked at again in the next drain, if it is one
    /// looked at.
    pub(super) fn mapped(&mut self, pid: Tgid) {
        if self.processes.contains_key(&pid) {
            self.stale.insert(pid);
        }
    }

    /// Process `pid` ran exec at `time_ns`: what it maps now is looked at anew (and it is young).
    pub(super) fn exec(&mut self, pid: Tgid, time_ns: u64, young_until_ns: &mut u64) {
        if let Some(looked) = self.processes.get_mut(&pid) {
            looked.table = 0;
            self.stale.insert(pid);
            *young_until_ns = (*young_until_ns).max(time_ns.saturating_add(YOUNG_NS));
        }
    }

    /// Process `parent` forked `child`: the child, which runs what its parent runs, is looked
    /// at in the next drain if the parent is one looked at.
    pub(super) fn forked(&mut self, parent: Tgid, child: Tgid) {
        if self.processes.contains_key(&parent) {
            self.processes.insert(child, Looked { table: 0 });
            self.stale.insert(child);
        }
    }

    /// Process `tgid` is to be looked at again later: an image found in it could not be taken
    /// now (its file not opened).
    pub(super) fn retry(&mut self, tgid: Tgid, now_ns: u64) {
        self.retries.entry(tgid).or_insert(now_ns.saturating_add(RETRY_NS));
    }

    /// Forgets a process gone.
    pub(super) fn forget(&mut self, tgid: Tgid) {
        self.processes.remove(&tgid);
        self.stale.remove(&tgid);
        self.retries.remove(&tgid);
    }

    /// The processes to look at now: those that mapped files, those whose files were not all
    /// known when an answer found an image (by `now_ns`), and those whose time to look again
    /// has come.
    pub(super) fn due(&mut self, now_ns: u64) -> Vec<Tgid> {
        let images_found = self.images_found;
        for answer in self.worker.answers(now_ns) {
            self.pending.remove(&(answer.key, answer.user));
            // Not readable through that process: asked again as its table is looked through.
            let Some(examined) = answer.examined else { continue };
            self.stats.files += 1;
            self.stats.given_up += u64::from(examined.given_up);
            if examined.images.is_empty() {
                let bytes = examined.bytes();
                self.examined.insert(answer.key, examined, bytes);
                continue;
            }
            self.stats.images += examined.images.len() as u64;
            self.images_found += 1;
            let bytes = examined.bytes();
            if !self.examined.insert(answer.key, examined.clone(), bytes) {
                self.unkept_images.put(answer.key, examined);
            }
        }
        if self.images_found != images_found {
            let tables = &self.tables;
            let waiting = self
                .processes
                .iter()
                .filter(|(_, looked)| tables.peek(&looked.table).is_none_or(|look| !look.complete));
            self.stale.extend(waiting.map(|(&tgid, _)| tgid));
        }
        self.retries.retain(|&tgid, &mut at_ns| {
            let due = at_ns <= now_ns;
            if due {
                self.stale.insert(tgid);
            }
            !due
        });
        let processes = &self.processes;
        self.stale.drain().filter(|tgid| processes.contains_key(tgid)).collect()
    }

    /// Looks at the process of `view`: the images of runtimes among the files it maps
    /// executable, as its table of mappings was last looked through (again if an image was
    /// found since, or, while it was not all known, if [`RETRY_NS`] have passed).
    pub(super) fn look(&mut self, view: &ProcessView<'_>, now_ns: u64) -> Vec<Found> {
        let (tgid, table) = (view.tgid(), view.table());
        let fresh = self.tables.get(&table).is_some_and(|look| {
            look.images_found == self.images_found
                && (look.complete || now_ns < look.looked_ns.saturating_add(RETRY_NS))
        });
        if !fresh {
            let look = self.look_through(view, now_ns);
            self.tables.put(table, look);
        }
        self.processes.insert(tgid, Looked { table });
        let look = self.tables.peek(&table).expect("just looked through");
        if !look.complete && self.worker.examining() {
            self.retries.entry(tgid).or_insert(look.looked_ns.saturating_add(RETRY_NS));
        }
        look.images.clone()
    }

    /// Looks through the files the process of `view` maps executable: the runtimes' images
    /// among those known; those not known yet are queued for the worker.
    fn look_through(&mut self, view: &ProcessView<'_>, now_ns: u64) -> TableLook {
        let (tgid, identity) = (view.tgid(), view.identity());
        let mut images = Vec::new();
        let mut complete = true;
        // Highest first: the loader maps the libraries a program starts with from the top down,
        // and what it loads later (hundreds of extension modules) below them, so an interpreter
        // loaded at the start is examined before those.
        for mapping in view.executable_files().iter().rev() {
            let Some(key) = FileKey::of(mapping) else { continue };
            if let Some(examined) = self.examined.get(&key).or_else(|| self.unkept_images.get(&key)) {
                images.extend(examined.images.iter().map(|(slot, recognised)| Found {
                    slot: *slot,
                    mapping: mapping.clone(),
                    recognised: recognised.clone(),
                }));
                continue;
            }
            complete = false;
            let user = identity.user;
            if self.pending.contains(&(key, user)) {
                continue;
            }
            let job = Job { key, user, tgid, identity: identity.clone(), mapping: mapping.clone() };
            if self.worker.push(job) {
                self.pending.insert((key, user));
            } else if self.worker.examines(user) {
                self.stats.left_for_later += 1;
            }
        }
        TableLook { images, complete, images_found: self.images_found, looked_ns: now_ns }
    }

    /// Once an epoch of the budget of what targets describe: what was found of files gives
    /// room back if it was short.
    pub(super) fn relieve(&mut self) {
        self.examined.relieve();
    }

    /// A file the process of `view` is about to map (a command's, before it runs): examined
    /// now, so that its first look finds it known.
    pub(super) fn expect(&mut self, view: &ProcessView<'_>, file: &Mapping) {
        let Some(key) = FileKey::of(file) else { return };
        if self.examined.get(&key).is_some() {
            return;
        }
        if let Some(examined) = examine(&self.recognisers, view.tgid(), view.identity(), file) {
            let bytes = examined.bytes();
            self.examined.insert(key, examined, bytes);
        }
    }

    /// The runtimes' images among the files the process of `view` maps, each examined now if
    /// it is not known (`profiler check`).
    pub(super) fn examine_now(&mut self, view: &ProcessView<'_>) -> Vec<Found> {
        for mapping in view.executable_files().iter() {
            self.expect(view, mapping);
        }
        let found = self.look(view, 0);
        self.forget(view.tgid());
        found
    }

    /// The summary's lines: what was given up on, what had to wait.
    pub(super) fn describe(&self) -> Vec<String> {
        let Stats { files, images, given_up, left_for_later } = self.stats;
        let mut lines = Vec::new();
        if given_up > 0 || left_for_later > 0 {
            lines.push(format!(
                "discovery: {files} files examined for runtimes ({images} images); {given_up} given up on after {} s \
                 each; {left_for_later} times a file was left for later, its user's {} files waiting already",
                worker::DEADLINE.as_secs(),
                worker::MAX_QUEUED
            ));
        }
        let abandoned = self.worker.abandoned();
        if !self.worker.examining() {
            lines.push(match abandoned {
                0 => "discovery stopped: its thread could not be started: runtimes not read".into(),
                _ => format!(
                    "discovery stopped after {abandoned} files took longer than {} s to examine: runtimes of processes \
                     seen since are not read",
                    worker::DEADLINE.as_secs()
                ),
            });
        } else if abandoned > 0 {
            lines.push(format!(
                "discovery: {abandoned} files took longer than {} s to examine; a user's files that did so {} times \
                 are not examined any more",
                worker::DEADLINE.as_secs(),
                worker::MAX_ABANDONED_PER_USER
            ));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use std::{
        any::Any,
        time::{Duration, Instant},
    };

    use super::*;
    use crate::{
        address_space::{AddressSpaces, Tracking},
        clock,
    };

    /// Marks the file that defines `malloc` (this process's C library), and names it.
    struct Libc;

    impl Recogniser for Libc {
        fn marks(&self, mark: Mark<'_>) -> bool {
            mark == Mark::Symbol(b"malloc")
        }

        fn recognise(&self, file: &ImageFile<'_>) -> anyhow::Result<Option<Arc<dyn Any + Send + Sync>>> {
            Ok(Some(Arc::new(file.name.to_owned())))
        }
    }

    /// Marks nothing.
    struct Nothing;

    impl Recogniser for Nothing {
        fn marks(&self, _: Mark<'_>) -> bool {
            false
        }

        fn recognise(&self, _: &ImageFile<'_>) -> anyhow::Result<Option<Arc<dyn Any + Send + Sync>>> {
            unreachable!("marked by nothing")
        }
    }

    fn discovery() -> Discovery {
        Discovery::new(vec![Box::new(Nothing), Box::new(Libc)])
    }

    /// Looks at this process until `Libc` is found in it (the worker's answers taken as they
    /// come), or fails after 20 s.
    fn look_until_libc_found(discovery: &mut Discovery, spaces: &mut AddressSpaces) {
        let now = clock::monotonic_ns();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if discovery.due(clock::monotonic_ns()).contains(&Tgid::own()) {
                let found = discovery.look(&spaces.view(Tgid::own(), now).unwrap(), now);
                if libc_found(&found) {
                    assert_eq!(found.len(), 1, "no other file is an image");
                    return;
                }
            }
            assert!(Instant::now() < deadline, "the worker answered");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn own_spaces() -> AddressSpaces {
        let mut spaces = AddressSpaces::new(Tracking { all: false, follow_forks: true });
        spaces.track(Tgid::own());
        spaces
    }

    /// Whether `found` has this process's C library, named, as the image of `Libc` (the second).
    fn libc_found(found: &[Found]) -> bool {
        found.iter().any(|found| {
            found.slot == 1
                && matches!(&found.recognised, Ok(image)
                    if image.downcast_ref::<String>().is_some_and(|name| name.starts_with("libc")))
        })
    }

    #[test]
    fn files_are_examined_on_the_worker_and_their_process_looked_at_again() {
        let (mut discovery, mut spaces) = (discovery(), own_spaces());
        let now = clock::monotonic_ns();
        let mut young_until_ns = 0;
        let found = discovery.observe(&spaces.view(Tgid::own(), now).unwrap(), now, &mut young_until_ns);
        assert!(found.is_empty(), "nothing known yet: its files are queued");
        assert!(!discovery.pending.is_empty());
        assert_eq!(young_until_ns, now + YOUNG_NS, "a process new to discovery is young");
        look_until_libc_found(&mut discovery, &mut spaces);
        let view = spaces.view(Tgid::own(), now).unwrap();
        assert!(discovery.observe(&view, now, &mut young_until_ns).is_empty(), "its table is looked at once");
        assert!(libc_found(&discovery.look(&view, now)), "what a file is, is kept");
        assert!(discovery.stats.files > 0 && discovery.stats.images == 1);
    }

    /// With no room in the budget of what targets describe, an image found is kept beside it:
    /// found at the next look, not examined again and again.
    #[test]
    fn an_image_the_budget_has_no_room_for_is_found_all_the_same() {
        let full: &'static Budget = Box::leak(Box::new(Budget::new(0)));
        let (mut discovery, mut spaces) =
            (Discovery::within(vec![Box::new(Nothing), Box::new(Libc)], full), own_spaces());
        let now = clock::monotonic_ns();
        discovery.look(&spaces.view(Tgid::own(), now).unwrap(), now);
        look_until_libc_found(&mut discovery, &mut spaces);
        assert_eq!(discovery.unkept_images.len(), 1);
    }

    /// A command's files, expected before it runs, are examined then: its first look finds
    /// them known, with no wait for the worker.
    #[test]
    fn an_image_expected_before_its_process_maps_it_is_found_at_once() {
        let (mut discovery, mut spaces) = (discovery(), own_spaces());
        let view = spaces.view(Tgid::own(), 0).unwrap();
        let libc = view
            .executable_files()
            .iter()
            .find_map(|mapping| match &mapping.backing {
                Backing::File { path, .. }
                    if path.file_name().is_some_and(|name| name.to_string_lossy().starts_with("libc.so")) =>
                {
                    Some(path.clone())
                }
                _ => None,
            })
            .expect("this process maps a C library");
        let mut young_until_ns = 0;
        discovery.follow(Tgid::own(), 5, &mut young_until_ns);
        assert_eq!(young_until_ns, 5 + YOUNG_NS);
        discovery.expect(&view, &Mapping::whole_file(&libc, &std::fs::metadata(&libc).unwrap()));
        assert!(discovery.pending.is_empty(), "examined at once");
        assert!(libc_found(&discovery.look(&view, 0)), "found at the first look");
    }

    #[test]
    fn processes_are_looked_at_again_when_they_map_exec_or_fork() {
        let mut discovery = discovery();
        let (own, other, child) = (Tgid::own(), Tgid(999_999_999), Tgid(999_999_998));
        let mut young_until_ns = 0;
        discovery.mapped(other);
        discovery.forked(other, child);
        discovery.exec(other, 1, &mut young_until_ns);
        assert!(discovery.due(0).is_empty(), "a process never looked at is not looked at for its events");
        assert_eq!(young_until_ns, 0);
        discovery.follow(own, 0, &mut young_until_ns);
        assert!(discovery.due(0).is_empty(), "followed, it waits for what it maps");
        discovery.mapped(own);
        assert_eq!(discovery.due(0), [own]);
        discovery.forked(own, child);
        assert_eq!(discovery.due(0), [child], "a child runs what its parent runs");
        discovery.exec(own, 10, &mut young_until_ns);
        assert_eq!(discovery.due(0), [own]);
        assert_eq!(young_until_ns, 10 + YOUNG_NS, "young again after its exec");
        discovery.mapped(own);
        discovery.forget(own);
        assert!(discovery.due(0).is_empty(), "a process gone is not looked at");
    }
}
