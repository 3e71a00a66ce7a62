//! A virtual network between agents: fixed one-way delay, optional drops, virtual time.
#![allow(dead_code, missing_docs, unreachable_pub)]

use std::collections::BTreeMap;
use std::net::SocketAddr;

use holdline_agent::{Agent, AgentConfig, Timers, UacConfig, UasConfig, UserPattern};
use holdline_base::{ConnId, Duration, Instant, Peer, Transport};

pub const UAC: &str = "127.0.0.1:5001";
pub const UAS: &str = "127.0.0.1:5002";

pub fn addr(s: &str) -> SocketAddr {
    s.parse()
        .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 9)))
}

/// A message in flight.
#[derive(Clone, Debug)]
pub struct Packet {
    pub at: Instant,
    pub from: SocketAddr,
    pub to: SocketAddr,
    pub bytes: Vec<u8>,
}

/// Everything the test wants to see: every packet sent, with its send time.
pub struct Net {
    pub now: Instant,
    pub delay: Duration,
    pub agents: Vec<(SocketAddr, Agent)>,
    pub transport: Transport,
    queue: BTreeMap<(Instant, u64), Packet>,
    seq: u64,
    pub log: Vec<Packet>,
    /// Decides whether a packet is delivered (true) or lost.
    pub filter: Box<dyn FnMut(&Packet) -> bool>,
}

impl Net {
    pub fn new(transport: Transport, agents: Vec<(SocketAddr, Agent)>) -> Self {
        Self {
            now: Instant::from_secs(1),
            delay: Duration::from_millis(1),
            agents,
            transport,
            queue: BTreeMap::new(),
            seq: 0,
            log: Vec::new(),
            filter: Box::new(|_| true),
        }
    }

    fn collect(&mut self) {
        let now = self.now;
        let delay = self.delay;
        let mut out = Vec::new();
        for (a, agent) in &mut self.agents {
            let from = *a;
            agent.drain_transmits(|peer, bytes| {
                out.push(Packet {
                    at: now,
                    from,
                    to: peer.addr,
                    bytes: bytes.to_vec(),
                });
            });
        }
        for p in out {
            self.log.push(p.clone());
            if (self.filter)(&p) {
                self.seq += 1;
                self.queue.insert((now + delay, self.seq), p);
            }
        }
    }

    /// Runs until `until` (virtual), delivering packets and firing timers in time order.
    pub fn run_until(&mut self, until: Instant) {
        loop {
            self.collect();
            let next_pkt = self.queue.keys().next().map(|k| k.0);
            let next_timer = self
                .agents
                .iter()
                .filter_map(|(_, a)| a.poll_timeout())
                .min();
            let next = [next_pkt, next_timer].into_iter().flatten().min();
            let Some(next) = next.filter(|t| *t <= until) else {
                self.now = until;
                for (_, a) in &mut self.agents {
                    a.handle_timeout(until);
                }
                self.collect();
                return;
            };
            self.now = self.now.max(next);
            while let Some(entry) = self.queue.first_entry() {
                if entry.key().0 > self.now {
                    break;
                }
                let p = entry.remove();
                let transport = self.transport;
                if let Some((_, agent)) = self.agents.iter_mut().find(|(a, _)| *a == p.to) {
                    let from = Peer {
                        addr: p.from,
                        transport,
                        conn: Some(ConnId(0)),
                    };
                    agent.handle(self.now, from, &p.bytes);
                }
            }
            for (_, a) in &mut self.agents {
                if a.poll_timeout().is_some_and(|t| t <= self.now) {
                    a.handle_timeout(self.now);
                }
            }
        }
    }

    /// Runs until the first agent (the generator) is done or `limit` passes; returns whether
    /// it is done.
    pub fn run_to_completion(&mut self, limit: Duration) -> bool {
        let end = self.now + limit;
        while self.now < end {
            let step = self.now + Duration::from_millis(100);
            self.run_until(step.min(end));
            if self.agents[0].1.is_done() {
                return true;
            }
        }
        false
    }

    pub fn agent(&self, i: usize) -> &Agent {
        &self.agents[i].1
    }

    /// Packets whose first line starts with `prefix`.
    pub fn sent(&self, prefix: &str) -> Vec<&Packet> {
        self.log
            .iter()
            .filter(|p| p.bytes.starts_with(prefix.as_bytes()))
            .collect()
    }
}

pub fn uac_config(transport: Transport, rate: f64, calls: u64) -> AgentConfig {
    let mut c = AgentConfig::new(transport, vec![addr(UAC)]);
    c.uac = Some(UacConfig {
        target: addr(UAS),
        to: UserPattern::parse("user{0..99}@example.com").unwrap_or_else(|e| panic!("{e}")),
        from_user: "caller".into(),
        arrivals: holdline_agent::ArrivalKind::Constant,
        rate,
        rate_end: None,
        calls: Some(calls),
        duration: None,
        hold: holdline_agent::Hold::Fixed(Duration::ZERO),
        cancel_after: None,
        max_active: None,
        uri_transport: true,
        hops: holdline_agent::Hops::default(),
    });
    c.timers = Timers::default();
    c.seed = 7;
    c
}

pub fn uas_config(transport: Transport, uas: UasConfig) -> AgentConfig {
    let mut c = AgentConfig::new(transport, vec![]);
    c.uas_addr = Some(addr(UAS));
    c.uas = Some(uas);
    c.seed = 8;
    c
}

pub fn pair(transport: Transport, rate: f64, calls: u64, uas: UasConfig) -> Net {
    let start = Instant::from_secs(1);
    let uac =
        Agent::new(uac_config(transport, rate, calls), start).unwrap_or_else(|e| panic!("{e}"));
    let uas = Agent::new(uas_config(transport, uas), start).unwrap_or_else(|e| panic!("{e}"));
    Net::new(transport, vec![(addr(UAC), uac), (addr(UAS), uas)])
}
