//! The ARP+ state machine of the BondingPlus paper, §3.3 and its Fig. 3.
//!
//! The paper proves ARP+ correct with a four-state transition diagram in
//! the style of Gouda and Huang's secure ARP: each transition is a
//! legitimate action labelled `<event type>:<message type>`, where the
//! event type is **B** (broadcast a message), **U** (unicast a message) or
//! **R** (receive a message). This module is that diagram as a type:
//! [`State::step`] takes an [`Event`] and returns the next state, or
//! [`Refused`] for an event the diagram does not allow in that state.
//!
//! The transitions, from §3.3:
//!
//! | from | event              | to   | the host then…                       |
//! |------|--------------------|------|--------------------------------------|
//! | S0   | B:ARPP_BROADCAST   | S1   | (has announced itself)               |
//! | S1   | R:ARPP_BROADCAST   | S2   | records the sender, must reply       |
//! | S1   | R:ARPP_REPLY       | S3   | records the sender                   |
//! | S1   | R:ARPP_CHANGE      | S3   | updates the sender's entry           |
//! | S1   | R:ARPP_CLEAR       | S3   | removes the sender's entry           |
//! | S1   | B:ARPP_CHANGE      | S1   | (its member set changed)             |
//! | S1   | B:ARPP_CLEAR       | S0   | (stops bonding)                      |
//! | S2   | U:ARPP_REPLY       | S1   | (has answered the newcomer)          |
//! | S3   | table updated      | S1   |                                      |
//! | S1   | B:ARPP_BROADCAST   | S1   | **ours**: a periodic re-announcement |
//!
//! The paper's S3 → S1 step is "updates its ARP+ table accordingly and then
//! moves back to S1": a local action with no message, here
//! [`Event::TableUpdated`]. The last row is not in the paper, which
//! announces once; we re-announce (see [`crate::announce`]), and a
//! re-announcement changes nothing in the diagram.
//!
//! Everything else is refused: a host in S0 knows no peers and has not
//! announced itself, so it neither receives nor answers; S2 and S3 are the
//! middle of one exchange, which must complete (the reply sent, the table
//! updated) before the next begins — a caller that receives a message then
//! queues it. No path panics.

use core::fmt;

/// A state of Fig. 3.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum State {
    /// Not bonded: the driver has just loaded (or has stopped), the host
    /// has not announced itself and keeps no peers.
    S0,
    /// Bonded and steady: announced, no exchange in progress. The only
    /// state from which a new exchange starts.
    S1,
    /// Received an `ARPP_BROADCAST` from a newcomer and recorded it; owes it
    /// an `ARPP_REPLY`.
    S2,
    /// Received an `ARPP_REPLY`, `ARPP_CHANGE` or `ARPP_CLEAR`; has the
    /// ARP+ table to update.
    S3,
}

impl State {
    /// Where a host starts: S0, when the driver is loaded (§3.3).
    pub const INITIAL: State = State::S0;

    /// All four states.
    pub const ALL: [State; 4] = [State::S0, State::S1, State::S2, State::S3];

    /// The state after `event`, and what the host must do because of it, or
    /// [`Refused`] if Fig. 3 has no such transition from `self`.
    pub fn step(self, event: Event) -> Result<(State, Option<Action>), Refused> {
        use Event::{Broadcast, Receive, TableUpdated, Unicast};
        use Message as M;
        use State::{S0, S1, S2, S3};
        let next = match (self, event) {
            (S0, Broadcast(M::Broadcast)) => (S1, None),
            (S1, Receive(M::Broadcast)) => (S2, Some(Action::RecordAndReply)),
            (S1, Receive(M::Reply | M::Change)) => (S3, Some(Action::UpdateEntry)),
            (S1, Receive(M::Clear)) => (S3, Some(Action::RemoveEntry)),
            (S1, Broadcast(M::Change | M::Broadcast)) => (S1, None),
            (S1, Broadcast(M::Clear)) => (S0, Some(Action::ForgetPeers)),
            (S2, Unicast(M::Reply)) => (S1, None),
            (S3, TableUpdated) => (S1, None),
            (state, event) => return Err(Refused { state, event }),
        };
        Ok(next)
    }

    /// Whether the host is bonded: it has announced itself and not yet
    /// cleared (S1, S2, S3).
    pub fn is_bonded(self) -> bool {
        self != State::S0
    }
}

/// The paper's four ARP+ messages (the heartbeat is ours and outside the
/// diagram).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Message {
    /// `ARPP_BROADCAST`.
    Broadcast,
    /// `ARPP_REPLY`.
    Reply,
    /// `ARPP_CHANGE`.
    Change,
    /// `ARPP_CLEAR`.
    Clear,
}

impl Message {
    /// All four.
    pub const ALL: [Message; 4] = [
        Message::Broadcast,
        Message::Reply,
        Message::Change,
        Message::Clear,
    ];
}

/// A labelled event of Fig. 3.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Event {
    /// **B**: the host broadcasts a message of this type.
    Broadcast(Message),
    /// **U**: the host unicasts a message of this type.
    Unicast(Message),
    /// **R**: the host receives a message of this type.
    Receive(Message),
    /// The local step out of S3: the ARP+ table has been updated.
    TableUpdated,
}

impl Event {
    /// Every event: B, U and R of each message, and `TableUpdated`.
    pub fn all() -> impl Iterator<Item = Event> {
        Message::ALL
            .into_iter()
            .flat_map(|m| [Event::Broadcast(m), Event::Unicast(m), Event::Receive(m)])
            .chain(core::iter::once(Event::TableUpdated))
    }
}

/// What the host must do after a transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Record the newcomer's mapping, then unicast it an `ARPP_REPLY`
    /// ([`Event::Unicast`]`(Reply)`).
    RecordAndReply,
    /// Insert or update the sender's entry, then [`Event::TableUpdated`].
    UpdateEntry,
    /// Remove the sender's entry, then [`Event::TableUpdated`].
    RemoveEntry,
    /// The host has stopped bonding: drop the whole ARP+ table.
    ForgetPeers,
}

/// An event Fig. 3 does not allow in a state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Refused {
    /// The state the host was (and stays) in.
    pub state: State,
    /// The event refused.
    pub event: Event,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ARP+: {:?} is not allowed in {:?}",
            self.event, self.state
        )
    }
}

impl core::error::Error for Refused {}

#[cfg(test)]
mod tests {
    use super::*;
    use Event::{Broadcast as B, Receive as R, TableUpdated, Unicast as U};
    use Message as M;
    use State::{S0, S1, S2, S3};
    use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
    use alloc::string::ToString;
    use alloc::vec::Vec;

    /// Fig. 3, written out from the text of §3.3 independently of `step`,
    /// plus our re-announcement. Every pair not listed must be refused.
    fn allowed() -> BTreeMap<(State, Event), State> {
        [
            ((S0, B(M::Broadcast)), S1),
            ((S1, R(M::Broadcast)), S2),
            ((S1, R(M::Reply)), S3),
            ((S1, R(M::Change)), S3),
            ((S1, R(M::Clear)), S3),
            ((S1, B(M::Change)), S1),
            ((S1, B(M::Clear)), S0),
            ((S1, B(M::Broadcast)), S1), // ours: re-announcement
            ((S2, U(M::Reply)), S1),
            ((S3, TableUpdated), S1),
        ]
        .into_iter()
        .collect()
    }

    #[test]
    fn every_pair_is_allowed_or_refused_as_in_the_paper() {
        let table = allowed();
        let mut n = 0;
        for s in State::ALL {
            for e in Event::all() {
                n += 1;
                match (s.step(e), table.get(&(s, e))) {
                    (Ok((next, _)), Some(&want)) => assert_eq!(next, want, "{s:?} {e:?}"),
                    (Err(r), None) => assert_eq!(r, Refused { state: s, event: e }),
                    (got, want) => panic!("{s:?} {e:?}: got {got:?}, paper says {want:?}"),
                }
            }
        }
        assert_eq!(n, 4 * 13);
        // §3.3: "At state S0, there is only one legitimate action", "At
        // state S1, six legitimate actions" (seven with our
        // re-announcement), "At state S2, only one".
        let legal = |s: State| Event::all().filter(|e| s.step(*e).is_ok()).count();
        assert_eq!([legal(S0), legal(S1), legal(S2), legal(S3)], [1, 7, 1, 1]);
    }

    fn reachable(from: State) -> BTreeSet<State> {
        let mut seen = BTreeSet::from([from]);
        let mut q = VecDeque::from([from]);
        while let Some(s) = q.pop_front() {
            for e in Event::all() {
                if let Ok((n, _)) = s.step(e)
                    && seen.insert(n)
                {
                    q.push_back(n);
                }
            }
        }
        seen
    }

    #[test]
    fn all_four_states_are_reachable_from_the_initial_one() {
        assert_eq!(reachable(State::INITIAL), BTreeSet::from(State::ALL));
    }

    #[test]
    fn every_bonded_state_returns_to_s1() {
        for s in reachable(State::INITIAL) {
            // S0 too: announcing bonds the host again.
            assert!(reachable(s).contains(&S1), "{s:?} cannot get back to S1");
        }
        // And in one step from S2, S3 (the paper's "leads the host back").
        assert_eq!(S2.step(U(M::Reply)).unwrap().0, S1);
        assert_eq!(S3.step(TableUpdated).unwrap().0, S1);
    }

    /// Every run of legal events from S1, up to a length, that completes
    /// an exchange (its last event is the reply sent or the table updated)
    /// ends in S1; and every run that never stops bonding stays bonded.
    #[test]
    fn completed_exchanges_end_in_s1() {
        let mut runs: Vec<(State, Vec<Event>)> = alloc::vec![(S1, Vec::new())];
        let mut completed = 0;
        for _ in 0..6 {
            let mut next = Vec::new();
            for (s, run) in &runs {
                for e in Event::all() {
                    let Ok((n, _)) = s.step(e) else { continue };
                    let mut r = run.clone();
                    r.push(e);
                    if matches!(e, U(M::Reply) | TableUpdated) {
                        assert_eq!(n, S1, "{r:?}");
                        completed += 1;
                    }
                    if !r.contains(&B(M::Clear)) {
                        assert!(n.is_bonded(), "{r:?}");
                    }
                    next.push((n, r));
                }
            }
            runs = next;
        }
        assert!(completed > 100);
    }

    #[test]
    fn actions() {
        assert_eq!(
            S1.step(R(M::Broadcast)),
            Ok((S2, Some(Action::RecordAndReply)))
        );
        assert_eq!(S1.step(R(M::Clear)), Ok((S3, Some(Action::RemoveEntry))));
        assert_eq!(S1.step(R(M::Change)), Ok((S3, Some(Action::UpdateEntry))));
        assert_eq!(S1.step(B(M::Clear)), Ok((S0, Some(Action::ForgetPeers))));
        assert!(
            S0.step(R(M::Broadcast))
                .unwrap_err()
                .to_string()
                .contains("S0")
        );
    }
}
