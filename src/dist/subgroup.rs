//! A [`Collective`] over some of a group's ranks: the sub-group's rank `i` is the parent's rank
//! `members[i]`, and every operation goes over the parent's point-to-point send/recv between
//! members only, so the other ranks of the parent need not take part (Multi-DSN gives each domain a
//! group of ranks whose encoders exchange halos among themselves: `dsn::parallel`).
//!
//! Collectives are built from pairwise exchanges in one global pair order (the lower rank sends
//! first, as in `dist::spatial`), which cannot deadlock even when sends block until received;
//! reductions add every member's buffer in member order, so every member ends with bitwise the
//! same result. Messages between two members stay in order with the parent's own traffic between
//! them as long as every rank makes its calls in the same program order, which the `Collective`
//! contract already demands.

use crate::dist::collective::{Collective, ReduceOp, Transport, check_rank, reduce_into};
use crate::error::{Error, Result};

/// The ranks `members` of `parent` as a group of their own.
pub struct SubGroup<'a> {
    parent: &'a dyn Collective,
    members: Vec<usize>,
    me: usize,
}

impl<'a> SubGroup<'a> {
    /// `members`: distinct parent ranks, this rank among them; their order gives the sub-ranks.
    pub fn new(parent: &'a dyn Collective, members: Vec<usize>) -> Result<Self> {
        let world = parent.world_size();
        for (i, &m) in members.iter().enumerate() {
            check_rank(m, world, "sub-group member")?;
            if members[..i].contains(&m) {
                return Err(Error::Internal(format!(
                    "sub-group: rank {m} is listed twice in {members:?}"
                )));
            }
        }
        let me = members
            .iter()
            .position(|&m| m == parent.rank())
            .ok_or_else(|| {
                Error::Internal(format!(
                    "sub-group: rank {} is not one of the members {members:?}",
                    parent.rank()
                ))
            })?;
        Ok(SubGroup {
            parent,
            members,
            me,
        })
    }

    /// The parent's ranks of the members, indexed by sub-group rank.
    pub fn members(&self) -> &[usize] {
        &self.members
    }

    fn parent_rank(&self, sub: usize, what: &str) -> Result<usize> {
        check_rank(sub, self.members.len(), what)?;
        Ok(self.members[sub])
    }
}

impl Collective for SubGroup<'_> {
    fn rank(&self) -> usize {
        self.me
    }

    fn world_size(&self) -> usize {
        self.members.len()
    }

    fn all_reduce(&self, buf: &mut [f32], op: ReduceOp) -> Result<()> {
        let all = self.all_gather(bytemuck::cast_slice(buf))?;
        let want = std::mem::size_of_val(buf);
        for (r, bytes) in all.iter().enumerate() {
            if bytes.len() != want {
                return Err(Error::bad_peer_data(
                    self.members[r],
                    format!("all-reduce of {} bytes, expected {want}", bytes.len()),
                ));
            }
        }
        // Member order on every member: the same additions, so bitwise the same result.
        buf.copy_from_slice(&bytemuck::pod_collect_to_vec::<u8, f32>(&all[0]));
        for bytes in &all[1..] {
            reduce_into(buf, &bytemuck::pod_collect_to_vec::<u8, f32>(bytes), op);
        }
        if op == ReduceOp::Mean {
            let n = self.members.len() as f32;
            buf.iter_mut().for_each(|v| *v /= n);
        }
        Ok(())
    }

    fn all_gather(&self, local: &[u8]) -> Result<Vec<Vec<u8>>> {
        let n = self.members.len();
        let mut out = vec![Vec::new(); n];
        out[self.me] = local.to_vec();
        for a in 0..n {
            for b in a + 1..n {
                let peer = match self.me {
                    m if m == a => b,
                    m if m == b => a,
                    _ => continue,
                };
                let to = self.members[peer];
                if self.me == a {
                    self.parent.send(to, local)?;
                    out[peer] = self.parent.recv(to)?;
                } else {
                    out[peer] = self.parent.recv(to)?;
                    self.parent.send(to, local)?;
                }
            }
        }
        Ok(out)
    }

    fn broadcast(&self, buf: &mut Vec<u8>, root: usize) -> Result<()> {
        let from = self.parent_rank(root, "broadcast root")?;
        if self.me == root {
            for (i, &m) in self.members.iter().enumerate() {
                if i != root {
                    self.parent.send(m, buf)?;
                }
            }
        } else {
            *buf = self.parent.recv(from)?;
        }
        Ok(())
    }

    fn barrier(&self) -> Result<()> {
        self.all_gather(&[]).map(|_| ())
    }

    fn send(&self, to: usize, data: &[u8]) -> Result<()> {
        self.parent.send(self.parent_rank(to, "send")?, data)
    }

    fn recv(&self, from: usize) -> Result<Vec<u8>> {
        self.parent.recv(self.parent_rank(from, "recv")?)
    }

    fn transport(&self) -> Transport {
        self.parent.transport()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::testutil::on_group;

    /// Two disjoint sub-groups of a 4-rank group run their collectives at the same time, and the
    /// parent's own traffic before and after still arrives where it should.
    #[test]
    fn disjoint_sub_groups_run_collectives_among_their_members_only() {
        let out = on_group(4, |comm| {
            let me = comm.rank();
            let members = if me % 2 == 0 { vec![2, 0] } else { vec![1, 3] };
            let g = SubGroup::new(&*comm, members.clone()).unwrap();
            assert_eq!(g.world_size(), 2);
            assert_eq!(members[g.rank()], me);
            // The parent's own all-gather around the sub-group's calls.
            let before = comm.all_gather(&[me as u8]).unwrap();
            let gathered = g.all_gather(&vec![me as u8; me + 1]).unwrap();
            let mut sum = vec![me as f32 + 0.5, 1.0];
            g.all_reduce(&mut sum, ReduceOp::Sum).unwrap();
            let mut mean = vec![me as f32];
            g.all_reduce(&mut mean, ReduceOp::Mean).unwrap();
            let mut b = if g.rank() == 1 {
                vec![7, me as u8]
            } else {
                vec![]
            };
            g.broadcast(&mut b, 1).unwrap();
            g.barrier().unwrap();
            // Point to point by sub-rank.
            let peer = 1 - g.rank();
            g.send(peer, &[g.rank() as u8]).unwrap();
            let got = g.recv(peer).unwrap();
            let after = comm.all_gather(&[me as u8 * 2]).unwrap();
            (before, gathered, sum, mean, b, got, after)
        });
        for (me, (before, gathered, sum, mean, b, got, after)) in out.into_iter().enumerate() {
            assert_eq!(before, [[0], [1], [2], [3]]);
            assert_eq!(after, [[0], [2], [4], [6]]);
            let members = if me % 2 == 0 { [2, 0] } else { [1, 3] };
            let want: Vec<Vec<u8>> = members.iter().map(|&m| vec![m as u8; m + 1]).collect();
            assert_eq!(gathered, want, "rank {me}");
            let total = members.iter().map(|&m| m as f32 + 0.5).sum::<f32>();
            assert_eq!(sum, [total, 2.0], "rank {me}");
            assert_eq!(mean, [members.iter().map(|&m| m as f32).sum::<f32>() / 2.0]);
            assert_eq!(
                b,
                [7, members[1] as u8],
                "rank {me}: broadcast from sub-rank 1"
            );
            let my_sub = members.iter().position(|&m| m == me).unwrap();
            assert_eq!(got, [(1 - my_sub) as u8]);
        }
    }

    #[test]
    fn bad_member_lists_are_named() {
        let errs = on_group(2, |comm| {
            let me = comm.rank();
            [
                SubGroup::new(&*comm, vec![me, me])
                    .err()
                    .map(|e| e.to_string()),
                SubGroup::new(&*comm, vec![me, 5])
                    .err()
                    .map(|e| e.to_string()),
                SubGroup::new(&*comm, vec![1 - me])
                    .err()
                    .map(|e| e.to_string()),
            ]
        });
        for [twice, missing, not_me] in errs {
            assert!(twice.unwrap().contains("twice"));
            assert!(missing.unwrap().contains("rank 5"));
            assert!(not_me.unwrap().contains("not one of the members"));
        }
        let g = SubGroup::new(&crate::dist::SingleProcess, vec![0]).unwrap();
        assert!(g.send(1, &[]).is_err());
    }
}
