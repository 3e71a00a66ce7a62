//! The per-message table (SIPp's screen): sent, received, retransmitted, timeouts,
//! unexpected, per request method and per response status.

use serde::Serialize;

/// The methods the table distinguishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Method {
    /// INVITE
    Invite,
    /// ACK
    Ack,
    /// BYE
    Bye,
    /// CANCEL
    Cancel,
    /// REGISTER
    Register,
    /// Anything else.
    Other,
}

impl Method {
    /// The method name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Invite => "INVITE",
            Self::Ack => "ACK",
            Self::Bye => "BYE",
            Self::Cancel => "CANCEL",
            Self::Register => "REGISTER",
            Self::Other => "OTHER",
        }
    }

    /// Classifies a method token.
    pub fn from_bytes(m: &[u8]) -> Self {
        match m {
            b"INVITE" => Self::Invite,
            b"ACK" => Self::Ack,
            b"BYE" => Self::Bye,
            b"CANCEL" => Self::Cancel,
            b"REGISTER" => Self::Register,
            _ => Self::Other,
        }
    }
}

/// A row of the table: a request by method, or a response by status and CSeq method.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MsgKey {
    /// A request.
    Request(Method),
    /// A response: status and the method it answers.
    Response(u16, Method),
}

impl MsgKey {
    /// The label printed in the table, e.g. `INVITE` or `200 (INVITE)`.
    pub fn label(&self) -> String {
        match self {
            Self::Request(m) => m.as_str().to_owned(),
            Self::Response(s, m) => format!("{s} ({})", m.as_str()),
        }
    }
}

/// Counts of one row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MsgStats {
    /// First transmissions sent.
    pub sent: u64,
    /// Received (including retransmissions).
    pub received: u64,
    /// Retransmissions sent.
    pub retransmitted: u64,
    /// Transactions of this request that timed out.
    pub timeouts: u64,
    /// Received messages that matched nothing.
    pub unexpected: u64,
}

/// The table; a handful of rows, kept in a small vector (linear search beats a map here).
#[derive(Clone, Debug, Default)]
pub struct MessageTable {
    rows: Vec<(MsgKey, MsgStats)>,
}

impl MessageTable {
    /// The row of `key`, created on first use.
    pub fn row(&mut self, key: MsgKey) -> &mut MsgStats {
        let i = match self.rows.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                self.rows.push((key, MsgStats::default()));
                self.rows.len() - 1
            }
        };
        &mut self.rows[i].1
    }

    /// The counts of `key` (zero when never seen).
    pub fn get(&self, key: MsgKey) -> MsgStats {
        self.rows
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, s)| *s)
            .unwrap_or_default()
    }

    /// Rows sorted by key (requests first, then responses by status).
    pub fn sorted(&self) -> Vec<(MsgKey, MsgStats)> {
        let mut rows = self.rows.clone();
        rows.sort_by_key(|(k, _)| *k);
        rows
    }

    /// Adds another table's counts.
    pub fn merge(&mut self, other: &Self) {
        for (k, s) in &other.rows {
            let r = self.row(*k);
            r.sent += s.sent;
            r.received += s.received;
            r.retransmitted += s.retransmitted;
            r.timeouts += s.timeouts;
            r.unexpected += s.unexpected;
        }
    }
}
