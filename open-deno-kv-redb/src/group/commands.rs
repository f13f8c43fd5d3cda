//! The commands the writer runs in a group: the kit's changes and open-deno-kv-redb's own
//! ([`Own`]: switching the change log, releasing a closed handle's messages), with the time each
//! is run as of and how a command's answer is held until its group commits.

use std::time::Duration;

use chrono::{DateTime, Utc};
use open_deno_kv_engine_kit::KvError;
use open_deno_kv_engine_kit::committer::{self, Answer, Answers, Change, Reply};

use crate::queue::Engine;
use crate::txn::{Fatal, Step};

/// One change the writer makes, run inside a group: the kit's changes, and open-deno-kv-redb's
/// own ([`Own`]).
pub(crate) type Command = Change<Engine, Own>;

/// The writer's commands of open-deno-kv-redb's own.
pub(crate) enum Own {
    /// See [`Release`].
    Release(Release),
    /// See [`Configure`].
    Configure(Configure),
}

impl committer::Command for Own {
    fn reject(self, err: KvError) {
        match self {
            Own::Release(release) => release.reject(err),
            Own::Configure(configure) => configure.reject(err),
        }
    }
}

/// Switches the change log on with a retention, or off (see [`crate::change_log`]): every
/// command after it in the writer's order sees the new setting.
pub(crate) struct Configure {
    pub(crate) retention: Option<Duration>,
    pub(crate) reply: Reply<()>,
}

impl committer::Command for Configure {
    fn reject(self, err: KvError) {
        committer::answer(Some(self.reply), Err(err));
    }
}

/// A handle closed: its unfinished messages are failed deliveries, and it gets no more.
pub(crate) struct Release {
    pub(crate) owner: u64,
    pub(crate) now: DateTime<Utc>,
    pub(crate) reply: Option<Reply<()>>,
}

impl committer::Command for Release {
    fn reject(self, err: KvError) {
        committer::answer(self.reply, Err(err));
    }
}

/// The time a command runs at.
pub(super) fn command_now(command: &Command) -> DateTime<Utc> {
    match command {
        Change::Write { now, .. } | Change::Take { now, .. } | Change::Settle { now, .. } => *now,
        Change::Engine(Own::Release(release)) => release.now,
        // A switch runs at no time of its own: it never holds a sweep back.
        Change::Engine(Own::Configure(_)) => DateTime::<Utc>::MAX_UTC,
    }
}

/// Holds a command's answer; a [`Fatal`] failure is the command's answer too, and abandons the
/// group.
pub(super) fn hold<T: Answer>(
    answers: &mut Answers,
    reply: Option<Reply<T>>,
    step: Step<T>,
) -> Result<(), Fatal> {
    match step {
        Ok(result) => {
            answers.hold(reply, result);
            Ok(())
        }
        Err(fatal) => {
            answers.hold(reply, Err(fatal.0.clone()));
            Err(fatal)
        }
    }
}
