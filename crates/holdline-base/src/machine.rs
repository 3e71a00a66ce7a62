use crate::{Instant, Transmit};

/// The drive contract every sans-IO state machine in holdline implements.
///
/// A driver (the server's worker loop, the load generator, the simulator) owns the clock,
/// the sockets and the buffers. It feeds inputs with [`handle`](Machine::handle), fires
/// timers with [`handle_timeout`](Machine::handle_timeout), and after either of those drains
/// [`poll_transmit`](Machine::poll_transmit) and [`poll_event`](Machine::poll_event) until
/// they return `None`, then arms one timer at [`poll_timeout`](Machine::poll_timeout).
pub trait Machine {
    /// What arrives from outside: a datagram, a framed stream message, a resolved name, a load
    /// sample.
    type Input;
    /// What the machine reports to its driver: e.g. a name to resolve, a binding to store.
    type Event;

    /// Processes one input at time `now`.
    fn handle(&mut self, now: Instant, input: Self::Input);

    /// Fires every timer due at or before `now`.
    fn handle_timeout(&mut self, now: Instant);

    /// Appends the next message to send to `buf` and describes it, or returns `None`.
    ///
    /// Call again until it returns `None` after every `handle` and `handle_timeout`.
    #[must_use]
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit>;

    /// The next time [`handle_timeout`](Machine::handle_timeout) must be called, if any.
    ///
    /// The value may change after any call to `handle`, `handle_timeout` or `poll_transmit`.
    #[must_use]
    fn poll_timeout(&self) -> Option<Instant>;

    /// The next event for the driver, or `None`.
    #[must_use]
    fn poll_event(&mut self) -> Option<Self::Event>;
}
