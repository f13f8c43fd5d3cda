//! Statements sent together: several statements for one round trip.
//!
//! tokio-postgres sends a statement's request when its future is first polled, and the server
//! answers requests one after another in the order they arrived. So statements whose futures
//! are polled once each, in order, before any answer is awaited travel to the server together
//! and run there in that order: a [`Flight`]. `BEGIN`, the statements of a transaction and its
//! `COMMIT` in one flight cost one round trip instead of one each.
//!
//! **What may follow a failure.** A statement can fail before its request leaves (a parameter
//! that does not encode, a closed connection): then nothing after it may be sent, least of all a
//! `COMMIT`, which would commit the transaction without it. [`Flight::send`] reports such a
//! failure, and its caller sends nothing more on that connection and drops it (the server rolls
//! back an open transaction when its connection ends). A statement refused by the server aborts
//! its transaction: a `COMMIT` sent after it is answered as a rollback. So a refusal is an
//! answer like any other, even when it is already there as the statement is sent: on a
//! multi-thread runtime the sending thread can be descheduled between handing the request to
//! the connection's task and looking for its answer, long enough for the server to refuse it
//! (a statement after a refused one is refused as soon as it arrives: "current transaction is
//! aborted").

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

/// A statement's future, as the client methods return it (boxed: a flight mixes statements).
pub(crate) type Statement<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, tokio_postgres::Error>> + Send + 'a>>;

/// A statement sent, with its answer if it came with the send.
type Sent<'a, T> = (Statement<'a, T>, Option<Result<T, tokio_postgres::Error>>);

/// Statements sent one after another without waiting for their answers (see the
/// [module docs](self)).
pub(crate) struct Flight<'a, T> {
    sent: Vec<Sent<'a, T>>,
}

impl<'a, T> Flight<'a, T> {
    /// An empty flight.
    pub(crate) fn new() -> Self {
        Flight { sent: Vec::new() }
    }

    /// Sends `statement` after the ones already sent, without waiting for its answer. An error
    /// means it failed before a server answered it — most likely before its request left — and
    /// nothing more may be sent on the connection (see the [module docs](self)); the server's
    /// refusal, even one that came back at once, is kept as the statement's answer.
    pub(crate) async fn send(
        &mut self,
        mut statement: Statement<'a, T>,
    ) -> Result<(), tokio_postgres::Error> {
        // Polled once: that sends the request (an answer cannot normally be there yet).
        let answer = match futures::poll!(&mut statement) {
            Poll::Ready(Err(err)) if err.as_db_error().is_none() => return Err(err),
            Poll::Ready(answer) => Some(answer),
            Poll::Pending => None,
        };
        self.sent.push((statement, answer));
        Ok(())
    }

    /// Waits for every answer; one per statement sent, in order.
    pub(crate) async fn answers(self) -> Vec<Result<T, tokio_postgres::Error>> {
        let mut answers = Vec::with_capacity(self.sent.len());
        // The answers arrive in request order, so awaiting them in turn costs nothing more.
        for (statement, answer) in self.sent {
            answers.push(match answer {
                Some(answer) => answer,
                None => statement.await,
            });
        }
        answers
    }
}
