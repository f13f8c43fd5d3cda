//! The committer's protocol, on a runner whose "transaction" numbers its commands.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::queue::{Delivery, DeliveryEngine, DeliveryOutcome, Taken};

/// What the test runner saw.
#[derive(Default)]
struct Seen {
    /// The tags of each group, in the order the groups ran.
    groups: Mutex<Vec<Vec<u64>>>,
    idles: AtomicUsize,
    closes: AtomicUsize,
}

/// Numbers every command it runs: the answer is the command's commit number.
struct Numbering {
    last: u64,
    seen: Arc<Seen>,
    idle_every: Duration,
    /// Each group sleeps this long (a slow fsync), so callers pile up behind it.
    group_takes: Duration,
}

enum Cmd {
    /// `tag` names the command in [`Seen::groups`].
    Number {
        tag: u64,
        reply: Option<Reply<u64>>,
    },
    Panic,
}

impl Command for Cmd {
    fn reject(self, err: KvError) {
        if let Cmd::Number { reply, .. } = self {
            answer(reply, Err(err));
        }
    }
}

impl GroupRunner for Numbering {
    type Command = Cmd;

    fn run_group(&mut self, group: Vec<Cmd>) {
        std::thread::sleep(self.group_takes);
        let mut answers = Answers::with_capacity(group.len());
        let mut tags = Vec::new();
        for command in group {
            match command {
                Cmd::Number { tag, reply } => {
                    self.last += 1;
                    tags.push(tag);
                    answers.hold(reply, Ok(self.last));
                }
                Cmd::Panic => panic!("a group failed in a way nobody planned for"),
            }
        }
        self.seen.groups.lock().unwrap().push(tags);
        answers.send(Ok(()));
    }

    fn idle_timeout(&self) -> Duration {
        self.idle_every
    }

    fn idle(&mut self) {
        self.seen.idles.fetch_add(1, Ordering::SeqCst);
    }

    fn close(&mut self) -> Result<(), KvError> {
        self.seen.closes.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// Thread names, as answers.
impl Answer for String {}

fn committer() -> (Committer<Numbering>, Arc<Seen>) {
    committer_with(Duration::from_secs(60), Duration::ZERO)
}

fn committer_with(
    idle_every: Duration,
    group_takes: Duration,
) -> (Committer<Numbering>, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let runner = Numbering {
        last: 0,
        seen: seen.clone(),
        idle_every,
        group_takes,
    };
    (Committer::start(runner, "test-committer").unwrap(), seen)
}

fn number(tag: u64) -> impl FnOnce(Reply<u64>) -> Cmd {
    move |reply| Cmd::Number {
        tag,
        reply: Some(reply),
    }
}

/// A caller that took the lead and never carried it out (its blocking closure dropped, as when
/// its runtime shuts down) does not strand its command: the standby thread runs it.
#[test]
fn a_lead_dropped_unused_passes_to_the_standby_thread() {
    let (committer, _) = committer();
    let (reply, answer) = oneshot::channel();
    let command = Cmd::Number {
        tag: 1,
        reply: Some(reply),
    };
    let lead = committer.core.submit(command, true);
    assert!(lead.is_some(), "nobody leads, so the caller must");
    drop(lead);
    assert_eq!(answer.blocking_recv().unwrap().unwrap(), 1);
    committer.stop().unwrap();
}

/// Callers on eight OS threads at once, outside any runtime (so each leader runs groups inline):
/// every command is answered, each caller sees its numbers increase, together they are exactly
/// 1..=N, and commands that waited behind a running group shared the next one.
#[test]
fn concurrent_callers_are_numbered_in_commit_order_and_share_groups() {
    let (committer, seen) = committer_with(Duration::from_secs(60), Duration::from_millis(1));
    let committer = Arc::new(committer);
    let per_thread = 40u64;
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let committer = committer.clone();
            std::thread::spawn(move || {
                (0..per_thread)
                    .map(|i| {
                        futures::executor::block_on(committer.ask(number(t * 1000 + i))).unwrap()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut all = HashSet::new();
    for thread in threads {
        let numbers = thread.join().unwrap();
        assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
        all.extend(numbers);
    }
    assert_eq!(all, (1..=8 * per_thread).collect());
    let groups = seen.groups.lock().unwrap();
    assert!(
        groups.iter().any(|g| g.len() > 1),
        "callers arriving during a commit join the next group: {groups:?}"
    );
    committer.stop().unwrap();
}

/// A command sent without waiting runs with nobody leading (the standby thread takes it), and
/// before anything sent after it.
#[test]
fn background_commands_run_in_order_without_a_caller() {
    let (committer, seen) = committer();
    committer.send(Cmd::Number {
        tag: 1,
        reply: None,
    });
    let second = futures::executor::block_on(committer.ask(number(2))).unwrap();
    assert_eq!(second, 2);
    let order: Vec<u64> = seen.groups.lock().unwrap().concat();
    assert_eq!(order, vec![1, 2]);
    committer.stop().unwrap();
}

/// A leader that panics in a group run while stopping still closes the committer, so `stop`
/// (which waits for the close) returns, with an error, and later commands are refused.
#[test]
fn a_panic_while_stopping_still_closes_the_committer() {
    let (committer, _) = committer();
    let committer = Arc::new(committer);
    committer.core.inbox().stopping = true;
    committer.core.inbox().commands.push_back(Cmd::Panic);
    let core = committer.core.clone();
    let panicked = std::thread::spawn(move || {
        let lead = Lead {
            core: core.clone(),
            until: usize::MAX,
            done: false,
        };
        core.inbox().leading = true;
        core.lead(lead);
    })
    .join();
    assert!(panicked.is_err());
    assert!(committer.core.inbox().closed);
    assert!(committer.stop().is_err(), "the close reports the panic");
    let refused = futures::executor::block_on(committer.ask(number(1)));
    assert!(matches!(refused, Err(KvError::Closed)), "{refused:?}");
}

/// On a current-thread runtime the standby thread leads: commands are answered all the same.
#[test]
fn on_a_current_thread_runtime_the_standby_thread_leads() {
    let (committer, _) = committer();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let numbers = runtime.block_on(async {
        let mut numbers = Vec::new();
        for tag in 0..5 {
            numbers.push(committer.ask(number(tag)).await.unwrap());
        }
        numbers
    });
    assert_eq!(numbers, vec![1, 2, 3, 4, 5]);
    committer.stop().unwrap();
}

/// On a multi-thread runtime a lone caller leads in place: its command runs on the caller's own
/// worker thread, not on the standby thread.
#[test]
fn on_a_multi_thread_runtime_a_lone_caller_leads_in_place() {
    struct Where(Reply<String>);
    impl Command for Where {
        fn reject(self, err: KvError) {
            let _ = self.0.send(Err(err));
        }
    }
    struct ThreadName;
    impl GroupRunner for ThreadName {
        type Command = Where;
        fn run_group(&mut self, group: Vec<Where>) {
            let name = std::thread::current().name().unwrap_or("").to_owned();
            let mut answers = Answers::default();
            for Where(reply) in group {
                answers.hold(Some(reply), Ok(name.clone()));
            }
            answers.send(Ok(()));
        }
    }
    let committer = Arc::new(Committer::start(ThreadName, "standby").unwrap());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("worker")
        .build()
        .unwrap();
    let asking = committer.clone();
    let ran_on = runtime
        .block_on(runtime.spawn(async move { asking.ask(Where).await.unwrap() }))
        .unwrap();
    assert_eq!(ran_on, "worker");
    committer.stop().unwrap();
}

/// Futures joined on the thread that calls a multi-thread runtime's `block_on` (as
/// `#[tokio::main] async fn main` joining many writes does) share groups: that thread must not
/// lead in place, or the commit blocks it and every future's command commits alone.
#[test]
fn futures_joined_on_the_block_on_thread_share_groups() {
    // Each group takes 20 ms, as a slow fsync would: the first command's group is still running
    // when the other futures queue theirs.
    let (committer, seen) = committer_with(Duration::from_secs(60), Duration::from_millis(20));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let numbers = runtime.block_on(futures::future::join_all(
        (0..16).map(|tag| committer.ask(number(tag))),
    ));
    let mut numbers: Vec<u64> = numbers.into_iter().map(Result::unwrap).collect();
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=16).collect::<Vec<_>>());
    let groups = seen.groups.lock().unwrap().len();
    // Leading in place gave 16 groups of one; handed to the standby thread, the first command
    // runs alone (or with a few) and the rest wait together for the next group.
    assert!(groups <= 3, "16 joined writes ran in {groups} groups");
    committer.stop().unwrap();
}

/// `stop` runs what was queued before it, closes the runner once, and afterwards every command
/// is answered `Closed` (none hangs); stopping again is harmless.
#[test]
fn stop_runs_what_is_queued_then_refuses() {
    let (committer, seen) = committer();
    {
        // Queued while a (pretend) leader holds the lead, so only `stop` can run it.
        let mut inbox = committer.core.inbox();
        inbox.leading = true;
        inbox.commands.push_back(Cmd::Number {
            tag: 7,
            reply: None,
        });
    }
    let core = committer.core.clone();
    let stopper = std::thread::spawn(move || {
        // The pretend leader finishes: it hands over to the standby thread.
        std::thread::sleep(Duration::from_millis(20));
        let lead = Lead {
            core: core.clone(),
            until: 0,
            done: false,
        };
        core.lead(lead);
    });
    committer.stop().unwrap();
    stopper.join().unwrap();
    assert_eq!(seen.groups.lock().unwrap().concat(), vec![7]);
    assert_eq!(seen.closes.load(Ordering::SeqCst), 1);
    let refused = futures::executor::block_on(committer.ask(number(8)));
    assert!(matches!(refused, Err(KvError::Closed)), "{refused:?}");
    committer.send(Cmd::Number {
        tag: 9,
        reply: None,
    });
    committer.stop().unwrap();
    assert_eq!(seen.closes.load(Ordering::SeqCst), 1);
}

/// A committer dropped without `stop` still closes its runner, from its standby thread.
#[test]
fn a_dropped_committer_closes_in_the_background() {
    let (committer, seen) = committer();
    committer.send(Cmd::Number {
        tag: 1,
        reply: None,
    });
    drop(committer);
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.closes.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "the runner was never closed");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(seen.groups.lock().unwrap().concat(), vec![1]);
}

/// The standby thread runs the idle work when the runner's timeout passes.
#[test]
fn idle_work_runs_on_the_standby_thread() {
    let (committer, seen) = committer_with(Duration::from_millis(5), Duration::ZERO);
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.idles.load(Ordering::SeqCst) < 2 {
        assert!(Instant::now() < deadline, "no idle work");
        std::thread::sleep(Duration::from_millis(5));
    }
    committer.stop().unwrap();
}

/// A delivery taken by a group that did not commit is dismissed (there is nothing to give back);
/// one taken by a group that committed, whose caller has gone, is given back undelivered.
#[tokio::test]
async fn answers_discard_what_a_failed_group_took() {
    #[derive(Default)]
    struct Settled(Mutex<Vec<(u32, DeliveryOutcome)>>);
    #[async_trait::async_trait]
    impl DeliveryEngine for Settled {
        type Ticket = u32;
        async fn settle(&self, ticket: u32, outcome: DeliveryOutcome) -> Result<(), KvError> {
            self.0.lock().unwrap().push((ticket, outcome));
            Ok(())
        }
        fn settle_in_background(&self, ticket: u32, outcome: DeliveryOutcome) {
            self.0.lock().unwrap().push((ticket, outcome));
        }
    }
    let engine = Arc::new(Settled::default());
    let taken = |ticket| Taken::Message(Delivery::new(engine.clone(), ticket, vec![]));

    let mut failed = Answers::default();
    let (reply, answer) = oneshot::channel();
    failed.hold(Some(reply), Ok(taken(1)));
    failed.send(Err(&KvError::Closed));
    assert!(matches!(answer.await.unwrap(), Err(KvError::Closed)));

    let mut committed = Answers::default();
    let (reply, answer) = oneshot::channel();
    drop(answer);
    committed.hold(Some(reply), Ok(taken(2)));
    committed.hold(None, Ok(taken(3)));
    committed.send(Ok(()));

    assert_eq!(
        *engine.0.lock().unwrap(),
        vec![
            (2, DeliveryOutcome::Undelivered),
            (3, DeliveryOutcome::Undelivered)
        ]
    );
}

/// A command for the in-place tests: answers with the name of the thread that ran it.
enum Placed {
    /// May run in place ([`Command::may_run_in_place`]); the runner takes it in place only if
    /// `accept`.
    Light { accept: bool, reply: Reply<String> },
    /// Must not run in place.
    Heavy(Reply<String>),
    /// May run in place, and panics there.
    Panics,
}

impl Command for Placed {
    fn reject(self, err: KvError) {
        match self {
            Placed::Light { reply, .. } | Placed::Heavy(reply) => {
                let _ = reply.send(Err(err));
            }
            Placed::Panics => {}
        }
    }

    fn may_run_in_place(&self) -> bool {
        !matches!(self, Placed::Heavy(_))
    }
}

/// Answers each command with the name of the thread that ran it.
struct NamesThreads;

impl GroupRunner for NamesThreads {
    type Command = Placed;

    fn run_group(&mut self, group: Vec<Placed>) {
        let name = std::thread::current().name().unwrap_or("").to_owned();
        let mut answers = Answers::default();
        for command in group {
            if let Placed::Light { reply, .. } | Placed::Heavy(reply) = command {
                answers.hold(Some(reply), Ok(name.clone()));
            }
        }
        answers.send(Ok(()));
    }

    fn try_run_in_place(&mut self, command: Placed) -> Result<(), Placed> {
        match command {
            Placed::Light { accept: true, .. } => {
                self.run_group(vec![command]);
                Ok(())
            }
            Placed::Panics => panic!("a command run in place failed in a way nobody planned for"),
            declined => Err(declined),
        }
    }
}

fn light(accept: bool) -> impl FnOnce(Reply<String>) -> Placed {
    move |reply| Placed::Light { accept, reply }
}

/// On a current-thread runtime, where the standby thread leads, a command that may run in place
/// and that the runner takes runs on the caller's own thread; one the runner gives back, and one
/// that may not run in place, run on the standby thread.
#[test]
fn on_a_current_thread_runtime_bookkeeping_runs_in_place_if_the_runner_agrees() {
    let committer = Committer::start(NamesThreads, "standby").unwrap();
    let (in_place, given_back, heavy) = std::thread::Builder::new()
        .name("caller".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            let ran = runtime.block_on(async {
                (
                    committer.ask(light(true)).await.unwrap(),
                    committer.ask(light(false)).await.unwrap(),
                    committer.ask(Placed::Heavy).await.unwrap(),
                )
            });
            committer.stop().unwrap();
            ran
        })
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(in_place, "caller");
    assert_eq!(given_back, "standby");
    assert_eq!(heavy, "standby");
}

/// A command that may run in place does not jump the queue: while a leader runs (here a
/// pretend one), it queues behind it and the standby thread runs it once handed the lead.
#[test]
fn nothing_runs_in_place_while_a_leader_runs() {
    let committer = Arc::new(Committer::start(NamesThreads, "standby").unwrap());
    committer.core.inbox().leading = true;
    let asking = committer.clone();
    let caller = std::thread::Builder::new()
        .name("caller".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap();
            runtime.block_on(asking.ask(light(true))).unwrap()
        })
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while committer.core.inbox().commands.is_empty() {
        assert!(Instant::now() < deadline, "the command was never queued");
        std::thread::sleep(Duration::from_millis(1));
    }
    // The pretend leader finishes and hands over.
    let lead = Lead {
        core: committer.core.clone(),
        until: 0,
        done: false,
    };
    committer.core.lead(lead);
    assert_eq!(caller.join().unwrap(), "standby");
    committer.stop().unwrap();
}

/// A command that panics while running in place does not strand the committer: the lead passes
/// to the standby thread, and later commands are answered.
#[test]
fn a_panic_in_place_passes_the_lead_on() {
    let committer = Arc::new(Committer::start(NamesThreads, "standby").unwrap());
    let asking = committer.clone();
    let panicked = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(asking.ask(|_: Reply<String>| Placed::Panics))
    })
    .join();
    assert!(panicked.is_err());
    let next = futures::executor::block_on(committer.ask(Placed::Heavy)).unwrap();
    assert!(!next.is_empty());
    let again = futures::executor::block_on(committer.ask(light(true))).unwrap();
    assert!(!again.is_empty());
    committer.stop().unwrap();
}
