//! Tests of [`super`] (`invalidate.rs`), kept apart for the length of the module.
use super::*;
use std::collections::HashSet;
use std::os::fd::BorrowedFd;
use std::sync::Mutex;

/// A model of the kernel's entry cache: cached names (positive or negative) and whether
/// it finds negative ones by name, has the epoch notification, and what it was sent.
#[derive(Default)]
struct Model {
    cached: Mutex<HashSet<(Ino, OsString)>>,
    keeps_negative: bool,
    negative: Mutex<HashSet<(Ino, OsString)>>,
    has_epoch: bool,
    epochs: Mutex<u32>,
    sent: Mutex<Vec<String>>,
    /// Entry invalidations sent with `FUSE_EXPIRE_ONLY`.
    expired: Mutex<u32>,
    /// Runs once, inside the next `inval_entry` or `delete`, after the kernel's own work:
    /// a LOOKUP answered while the notification was on its way.
    meanwhile: Mutex<Option<Meanwhile>>,
}

type Meanwhile = Box<dyn FnOnce(&Model) + Send>;

impl Model {
    /// A kernel that keeps misses named by `inval_entry` or not, with the epoch or not.
    fn new(keeps_negative: bool, has_epoch: bool) -> Model {
        Model {
            keeps_negative,
            has_epoch,
            ..Model::default()
        }
    }

    fn cache_miss(&self, parent: Ino, name: &str) {
        let key = (parent, OsString::from(name));
        self.cached.lock().unwrap().insert(key.clone());
        self.negative.lock().unwrap().insert(key);
    }
}

impl Kernel for Model {
    fn open_backing(
        &self,
        _fd: BorrowedFd<'_>,
        _w: crate::kernel::BackingWrites,
    ) -> io::Result<u32> {
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    }

    fn close_backing(&self, _id: u32) -> io::Result<()> {
        Ok(())
    }

    fn inval_entry(&self, parent: Ino, name: &OsStr, expire_only: bool) -> io::Result<()> {
        *self.expired.lock().unwrap() += u32::from(expire_only);
        self.sent
            .lock()
            .unwrap()
            .push(format!("entry {parent} {name:?}"));
        let key = (parent, name.to_os_string());
        let result = if self.keeps_negative && self.negative.lock().unwrap().contains(&key) {
            Err(io::Error::from_raw_os_error(libc::ENOENT))
        } else if self.cached.lock().unwrap().remove(&key) {
            self.negative.lock().unwrap().remove(&key);
            Ok(())
        } else {
            Err(io::Error::from_raw_os_error(libc::ENOENT))
        };
        let meanwhile = self.meanwhile.lock().unwrap().take();
        if let Some(lookup) = meanwhile {
            lookup(self);
        }
        result
    }

    fn delete(&self, parent: Ino, _child: Ino, name: &OsStr) -> io::Result<()> {
        self.inval_entry(parent, name, false)
    }

    fn inval_inode(&self, ino: Ino, _offset: i64, _len: i64) -> io::Result<()> {
        self.sent.lock().unwrap().push(format!("inode {ino}"));
        Ok(())
    }

    fn inc_epoch(&self) -> io::Result<()> {
        if !self.has_epoch {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        *self.epochs.lock().unwrap() += 1;
        self.cached.lock().unwrap().clear();
        self.negative.lock().unwrap().clear();
        Ok(())
    }
}

fn sending(model: &Arc<Model>, timeout: u64) -> (Sending<Model>, Arc<Misses>, Arc<Stats>) {
    let misses = Arc::new(Misses::new(Duration::from_secs(timeout)));
    let stats = Arc::new(Stats::new());
    let s = Sending::new(
        model.clone(),
        misses.clone(),
        stats.clone(),
        Arc::new(Learnt::granted(Granted {
            inc_epoch: model.has_epoch,
            ..Granted::default()
        })),
    );
    (s, misses, stats)
}

fn event(stats: &Stats, name: &str) -> u64 {
    stats
        .snapshot()
        .events
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(0, |(_, v)| *v)
}

/// One batch: the reports, then the end of the batch.
fn batch(s: &mut Sending<Model>, reports: Vec<Report>) {
    for r in reports {
        s.handle(r);
    }
    s.flush();
}

fn entry(parent: Ino, name: &str) -> Report {
    Report::Entry(parent, name.into())
}

#[test]
fn a_kept_miss_falls_back_to_the_epoch_once_per_batch() {
    let model = Arc::new(Model::new(true, true));
    let (mut s, misses, stats) = sending(&model, 3600);
    let probes = *model.epochs.lock().unwrap();
    for name in ["a", "b"] {
        model.cache_miss(1, name);
        misses.note(1, OsStr::new(name));
    }
    batch(&mut s, vec![entry(1, "a"), entry(1, "b")]);
    assert!(
        model.cached.lock().unwrap().is_empty(),
        "the epoch dropped them"
    );
    assert_eq!(
        *model.epochs.lock().unwrap() - probes,
        1,
        "one epoch per batch"
    );
    assert_eq!(event(&stats, "inval_fallback"), 2);
    assert_eq!(event(&stats, "inval_failed"), 0);
    assert_eq!(s.learnt.misses_enoent.load(Ordering::Relaxed), 2);
}

#[test]
fn invalidations_of_the_root_wait_for_its_first_getattr() {
    let model = Arc::new(Model::new(false, true));
    let (mut s, _misses, _stats) = sending(&model, 3600);
    let sent = |m: &Model| m.sent.lock().unwrap().clone();
    batch(&mut s, vec![Report::Inode(ROOT_INO), Report::Inode(5)]);
    batch(&mut s, vec![Report::Inode(ROOT_INO)]);
    assert_eq!(sent(&model), ["inode 5"], "the root's are held");
    batch(&mut s, vec![Report::ReleaseRoot]);
    assert_eq!(
        sent(&model),
        ["inode 5", "inode 1"],
        "one for all that were held"
    );
    batch(&mut s, vec![Report::Inode(ROOT_INO)]);
    assert_eq!(sent(&model).len(), 3, "sent at once after the release");
}

#[test]
fn a_release_with_nothing_held_sends_nothing() {
    let model = Arc::new(Model::new(false, true));
    let (mut s, _misses, _stats) = sending(&model, 3600);
    batch(&mut s, vec![Report::ReleaseRoot]);
    assert!(model.sent.lock().unwrap().is_empty());
}

#[test]
fn names_never_answered_with_a_miss_need_no_fallback() {
    let model = Arc::new(Model::new(true, true));
    let (mut s, _misses, stats) = sending(&model, 3600);
    let probes = *model.epochs.lock().unwrap();
    // A host create nobody looked up: ENOENT, nothing cached, nothing more to do.
    batch(&mut s, vec![entry(1, "fresh")]);
    assert_eq!(*model.epochs.lock().unwrap(), probes);
    assert_eq!(event(&stats, "inval_fallback"), 0);
    assert_eq!(event(&stats, "inval_entry"), 1);
}

#[test]
fn kernels_that_drop_misses_by_name_need_no_fallback() {
    let model = Arc::new(Model::new(false, true));
    let (mut s, misses, stats) = sending(&model, 3600);
    let probes = *model.epochs.lock().unwrap();
    model.cache_miss(1, "a");
    misses.note(1, OsStr::new("a"));
    batch(&mut s, vec![entry(1, "a")]);
    assert!(model.cached.lock().unwrap().is_empty());
    assert_eq!(*model.epochs.lock().unwrap(), probes);
    assert_eq!(event(&stats, "inval_fallback"), 0);
    assert_eq!(s.learnt.misses_dropped.load(Ordering::Relaxed), 1);
    // The record is spent: a second report of the same name needs nothing.
    batch(&mut s, vec![entry(1, "a")]);
    assert_eq!(event(&stats, "inval_fallback"), 0);
}

#[test]
fn expired_misses_need_no_fallback() {
    let model = Arc::new(Model::new(true, true));
    let (mut s, misses, stats) = sending(&model, 1);
    misses.note_at(1, OsStr::new("a"), Instant::now() - Duration::from_secs(2));
    batch(&mut s, vec![entry(1, "a")]);
    assert_eq!(event(&stats, "inval_fallback"), 0);
}

#[test]
fn no_record_without_a_negative_timeout() {
    let misses = Misses::new(Duration::ZERO);
    misses.note(1, OsStr::new("a"));
    assert!(!misses.settle(1, OsStr::new("a"), Instant::now(), u64::MAX));
}

#[test]
fn a_full_record_treats_every_enoent_as_a_possible_kept_miss() {
    let misses = Misses::new(Duration::from_secs(60));
    let now = Instant::now();
    for i in 0..MISSES_CAPACITY {
        misses.note_at(1, OsStr::new(&format!("n{i}")), now);
    }
    misses.note_at(1, OsStr::new("last"), now);
    assert!(misses.settle(1, OsStr::new("last"), now, u64::MAX));
    assert!(
        misses.settle(7, OsStr::new("never noted"), now, u64::MAX),
        "a forgotten miss may be any name"
    );
    assert!(!misses.settle(7, OsStr::new("x"), now + Duration::from_secs(61), u64::MAX));
}

#[test]
fn without_an_epoch_everything_drops_the_remembered_misses_and_says_what_it_could_not() {
    let model = Arc::new(Model::new(false, false));
    let (mut s, misses, _stats) = sending(&model, 3600);
    assert!(!s.learnt.epoch.load(Ordering::Relaxed));
    for name in ["a", "b"] {
        model.cache_miss(1, name);
        misses.note(1, OsStr::new(name));
    }
    let done = s.all(Instant::now());
    assert_eq!(done.names, 2);
    assert!(!done.epoch && done.did_something());
    assert!(done.not_done.unwrap().contains("INC_EPOCH"));
    assert!(model.cached.lock().unwrap().is_empty());
    let nothing = s.all(Instant::now());
    assert!(!nothing.did_something(), "{nothing:?}");
}

#[test]
fn with_an_epoch_everything_drops_every_name() {
    let model = Arc::new(Model::new(false, true));
    let (mut s, _misses, stats) = sending(&model, 3600);
    model.cached.lock().unwrap().insert((1, "positive".into()));
    let done = s.all(Instant::now());
    assert!(done.epoch && done.not_done.is_none());
    assert!(model.cached.lock().unwrap().is_empty());
    assert_eq!(event(&stats, "inc_epoch"), 1);
}

#[test]
fn a_kept_miss_without_an_epoch_is_counted_and_warned_once() {
    let model = Arc::new(Model::new(true, false));
    let (mut s, misses, stats) = sending(&model, 3600);
    for name in ["a", "b"] {
        model.cache_miss(1, name);
        misses.note(1, OsStr::new(name));
        batch(&mut s, vec![entry(1, name)]);
    }
    assert_eq!(event(&stats, "inval_fallback"), 2);
    assert!(s.warned);
    assert_eq!(event(&stats, "inc_epoch"), 0);
}

/// A LOOKUP of `name` in 1 answered with a miss while the next notification is on its
/// way: the kernel caches the miss after it, and the server notes it.
fn lookup_meanwhile(model: &Model, misses: &Arc<Misses>, name: &'static str) {
    let misses = misses.clone();
    *model.meanwhile.lock().unwrap() = Some(Box::new(move |m: &Model| {
        m.cache_miss(1, name);
        misses.note(1, OsStr::new(name));
    }));
}

/// Host delete of a name the kernel holds, a lookup through the mount right after, then
/// a host re-create: on a kernel that keeps misses named by `inval_entry`, the miss the
/// lookup left must still be remembered when the re-create is reported.
#[test]
fn a_miss_noted_while_a_deletion_is_sent_survives_it() {
    for keeps_negative in [true, false] {
        let model = Arc::new(Model::new(keeps_negative, true));
        let (mut s, misses, stats) = sending(&model, 3600);
        model.cached.lock().unwrap().insert((1, "x".into()));
        lookup_meanwhile(&model, &misses, "x");
        batch(&mut s, vec![Report::Deleted(1, 9, "x".into())]);
        assert!(model.negative.lock().unwrap().contains(&(1, "x".into())));
        batch(&mut s, vec![entry(1, "x")]);
        assert!(
            model.cached.lock().unwrap().is_empty(),
            "the re-created name is visible (keeps_negative: {keeps_negative})"
        );
        let fallbacks = event(&stats, "inval_fallback");
        assert_eq!(fallbacks, u64::from(keeps_negative));
    }
}

/// The same race on the create side: a miss noted while an entry's invalidation is on its
/// way outlives that invalidation, so the next one of the name still knows of it.
#[test]
fn a_miss_noted_while_an_entry_is_sent_outlives_it() {
    let model = Arc::new(Model::new(true, true));
    let (mut s, misses, stats) = sending(&model, 3600);
    lookup_meanwhile(&model, &misses, "y");
    batch(&mut s, vec![entry(1, "y")]);
    assert_eq!(event(&stats, "inval_fallback"), 1, "the miss may be kept");
    model.cache_miss(1, "y");
    batch(&mut s, vec![entry(1, "y")]);
    assert_eq!(
        event(&stats, "inval_fallback"),
        2,
        "its record was not spent"
    );
    assert!(model.cached.lock().unwrap().is_empty());
    // Spent now: the record was noted before the second invalidation started.
    batch(&mut s, vec![entry(1, "y")]);
    assert_eq!(event(&stats, "inval_fallback"), 2);
}

/// Renames on the host arrive as a deletion of the old name and an entry of the new one;
/// a lookup of the old name between them leaves a miss a later rename back must find.
#[test]
fn a_rename_back_after_a_lookup_of_the_old_name_is_seen() {
    let model = Arc::new(Model::new(true, true));
    let (mut s, misses, _stats) = sending(&model, 3600);
    model.cached.lock().unwrap().insert((1, "old".into()));
    lookup_meanwhile(&model, &misses, "old");
    batch(
        &mut s,
        vec![Report::Deleted(1, 9, "old".into()), entry(1, "new")],
    );
    batch(
        &mut s,
        vec![Report::Deleted(1, 9, "new".into()), entry(1, "old")],
    );
    assert!(
        !model.negative.lock().unwrap().contains(&(1, "old".into())),
        "the old name, back, is visible"
    );
}

#[test]
fn the_epoch_is_what_init_granted_and_is_never_probed() {
    let model = Arc::new(Model::new(true, true));
    let misses = Arc::new(Misses::new(Duration::from_secs(60)));
    let stats = Arc::new(Stats::new());
    let inv = NotifyInvalidator::start(model.clone(), misses, stats, Granted::default()).unwrap();
    let features = inv.features();
    assert!(features[0].1.starts_with("no"), "{features:?}");
    assert_eq!(
        *model.epochs.lock().unwrap(),
        0,
        "nothing was sent to learn it"
    );
    let done = inv.invalidate_all();
    assert!(!done.epoch, "not granted: not tried");
    assert_eq!(*model.epochs.lock().unwrap(), 0);

    // Granted, but refused as unknown: learnt, and not tried again.
    let refusing = Arc::new(Model::new(true, false));
    let (mut s, _misses, stats) = sending(&refusing, 60);
    s.learnt.epoch.store(true, Ordering::Relaxed);
    assert!(!s.all(Instant::now()).epoch);
    assert!(!s.learnt.epoch.load(Ordering::Relaxed));
    assert!(!s.all(Instant::now()).epoch);
    assert_eq!(event(&stats, "inval_failed"), 1, "tried once");
}

#[test]
fn inode_now_sends_from_the_calling_thread_and_counts() {
    let model = Arc::new(Model::new(false, true));
    let stats = Arc::new(Stats::new());
    let misses = Arc::new(Misses::new(Duration::ZERO));
    let inv = NotifyInvalidator::start(
        model.clone(),
        misses,
        stats.clone(),
        Granted {
            inc_epoch: true,
            ..Granted::default()
        },
    )
    .unwrap();
    inv.inode_now(7);
    assert_eq!(
        *model.sent.lock().unwrap(),
        ["inode 7"],
        "sent before it returned"
    );
    assert_eq!(event(&stats, "inval_inode"), 1);
}

#[test]
fn names_are_expired_rather_than_unhashed_where_the_kernel_allows() {
    for expire_only in [false, true] {
        let model = Arc::new(Model::new(false, false));
        let misses = Arc::new(Misses::new(Duration::from_secs(60)));
        let stats = Arc::new(Stats::new());
        let granted = Granted {
            expire_only,
            ..Granted::default()
        };
        let mut s = Sending::new(
            model.clone(),
            misses,
            stats,
            Arc::new(Learnt::granted(granted)),
        );
        model.cache_miss(1, "cwd");
        batch(&mut s, vec![entry(1, "cwd"), entry(1, "other")]);
        assert_eq!(*model.expired.lock().unwrap(), 2 * u32::from(expire_only));
    }
}
