//! The boundary between the compute modules and the protocol: each compute type an event carries
//! becomes its protocol twin ([`super::reports`]) here, and only here, so the rest of the protocol
//! and the workbench never name a compute type (`tests/architecture.rs` checks it). A field added
//! to a compute type stays off the wire until it is added to its twin, with a version bump.

use super::reports::{
    ComponentTimes, DomainLosses, DsnEpochReport, EpochReport, IterationReport, LossPoint,
    PatchMap, PatchTile, RankEpoch, Shot, SocketKind, Transport,
};
use crate::{dist, dsn, fwi, optim, physics, train};

impl From<&optim::IterationReport> for IterationReport {
    fn from(r: &optim::IterationReport) -> Self {
        IterationReport {
            iteration: r.iteration,
            iterations: r.iterations,
            psnr_db: r.psnr_db,
            ssim: r.ssim,
            objective: r.objective,
            relative_change: r.relative_change,
            times: (&r.times).into(),
        }
    }
}

impl From<&optim::ComponentTimes> for ComponentTimes {
    fn from(t: &optim::ComponentTimes) -> Self {
        ComponentTimes {
            gradient_secs: t.gradient_secs,
            denoiser_secs: t.denoiser_secs,
            other_secs: t.other_secs,
            communication_secs: t.communication_secs,
        }
    }
}

impl From<&fwi::EpochReport> for EpochReport {
    fn from(r: &fwi::EpochReport) -> Self {
        EpochReport {
            epoch: r.epoch,
            epochs: r.epochs,
            loss: r.loss,
            model_error: r.model_error,
            cutoff_hz: r.cutoff_hz,
            batch: r.batch.clone(),
            ranks: r.ranks.iter().map(RankEpoch::from).collect(),
            secs: r.secs,
        }
    }
}

impl From<&fwi::RankEpoch> for RankEpoch {
    fn from(r: &fwi::RankEpoch) -> Self {
        RankEpoch {
            rank: r.rank,
            shots: r.shots.clone(),
            forward_secs: r.forward_secs,
            adjoint_secs: r.adjoint_secs,
            communication_secs: r.communication_secs,
        }
    }
}

impl From<&physics::wave::Shot> for Shot {
    fn from(s: &physics::wave::Shot) -> Self {
        Shot {
            sources: s.sources.clone(),
            receivers: s.receivers.clone(),
        }
    }
}

impl From<&train::LossPoint> for LossPoint {
    fn from(p: &train::LossPoint) -> Self {
        LossPoint {
            step: p.step,
            loss: p.loss,
        }
    }
}

impl From<&dsn::run::EpochReport> for DsnEpochReport {
    fn from(r: &dsn::run::EpochReport) -> Self {
        DsnEpochReport {
            epoch: r.epoch,
            losses: r.losses.iter().map(DomainLosses::from).collect(),
            accuracy: r.accuracy.clone(),
            target_accuracy: r.target_accuracy,
        }
    }
}

impl From<&dsn::network::DomainLosses> for DomainLosses {
    fn from(l: &dsn::network::DomainLosses) -> Self {
        DomainLosses {
            task: l.task,
            reconstruction: l.reconstruction,
            difference: l.difference,
            similarity: l.similarity,
        }
    }
}

impl From<&dist::patch_map::PatchMap> for PatchMap {
    fn from(m: &dist::patch_map::PatchMap) -> Self {
        PatchMap {
            spatial: m.spatial.clone(),
            tiles: m.tiles.iter().map(PatchTile::from).collect(),
        }
    }
}

impl From<&dist::patch_map::PatchTile> for PatchTile {
    fn from(t: &dist::patch_map::PatchTile) -> Self {
        PatchTile {
            window: t.window.clone(),
            region: t.region.clone(),
            rank: t.rank,
        }
    }
}

impl From<dist::Transport> for Transport {
    fn from(t: dist::Transport) -> Self {
        match t {
            dist::Transport::Single => Transport::Single,
            dist::Transport::Sockets(k) => Transport::Sockets(k.into()),
            dist::Transport::Mpi => Transport::Mpi,
            dist::Transport::Nccl(k) => Transport::Nccl(k.into()),
        }
    }
}

impl From<dist::SocketKind> for SocketKind {
    fn from(k: dist::SocketKind) -> Self {
        match k {
            dist::SocketKind::Unix => SocketKind::Unix,
            dist::SocketKind::Tcp => SocketKind::Tcp,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field crosses: a twin built from a compute value serialises (as JSON, which names the
    /// fields) to what the compute value does, so a field dropped or renamed here fails.
    fn same_json<A: serde::Serialize, B: serde::Serialize>(compute: &A, protocol: &B) {
        assert_eq!(
            serde_json::to_value(compute).unwrap(),
            serde_json::to_value(protocol).unwrap()
        );
    }

    #[test]
    fn twins_carry_every_field() {
        let report = optim::IterationReport {
            iteration: 2,
            iterations: 9,
            psnr_db: Some(21.5),
            ssim: Some(0.5),
            objective: None,
            relative_change: 0.25,
            times: optim::ComponentTimes {
                gradient_secs: 1.0,
                denoiser_secs: 2.0,
                other_secs: 3.0,
                communication_secs: 4.0,
            },
        };
        same_json(&report, &IterationReport::from(&report));
        let epoch = fwi::EpochReport {
            epoch: 1,
            epochs: 3,
            loss: 0.5,
            model_error: Some(0.1),
            cutoff_hz: None,
            batch: vec![2, 0],
            ranks: vec![fwi::RankEpoch {
                rank: 1,
                shots: vec![0],
                forward_secs: 1.0,
                adjoint_secs: 2.0,
                communication_secs: 3.0,
            }],
            secs: 4.0,
        };
        same_json(&epoch, &EpochReport::from(&epoch));
        let shot = physics::wave::Shot {
            sources: vec![[0, 1]],
            receivers: vec![[2, 3], [4, 5]],
        };
        same_json(&shot, &Shot::from(&shot));
        let point = train::LossPoint {
            step: 7,
            loss: 0.125,
        };
        same_json(&point, &LossPoint::from(&point));
        let dsn_epoch = dsn::run::EpochReport {
            epoch: 0,
            losses: vec![dsn::network::DomainLosses {
                task: 1.0,
                reconstruction: 2.0,
                difference: 3.0,
                similarity: 4.0,
            }],
            accuracy: vec![0.5],
            target_accuracy: 0.25,
        };
        same_json(&dsn_epoch, &DsnEpochReport::from(&dsn_epoch));
        let map = dist::patch_map::PatchMap {
            spatial: vec![8, 6],
            tiles: vec![dist::patch_map::PatchTile {
                window: vec![(-1, 5), (0, 6)],
                region: vec![(0, 4), (0, 6)],
                rank: 1,
            }],
        };
        same_json(&map, &PatchMap::from(&map));
        for t in [
            dist::Transport::Single,
            dist::Transport::Sockets(dist::SocketKind::Unix),
            dist::Transport::Mpi,
            dist::Transport::Nccl(dist::SocketKind::Tcp),
        ] {
            same_json(&t, &Transport::from(t));
            assert_eq!(t.to_string(), Transport::from(t).to_string());
        }
    }
}
