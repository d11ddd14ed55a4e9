"""CrypTen's own tensors with this project's protocol.

* :mod:`.safe` — :func:`install`: in this party's process, CrypTen's randomness
  (triples, binary triples, B2A bits, wrap randomness, pseudo-random zero shares)
  comes from the project's AES-CTR dealer and streams, and its openings and
  gathers go point-to-point over the encrypted links.
* :mod:`.bridge` — :func:`rank_mpctensor` and :func:`evaluate_mpctensor`: the
  mid-ranks and the DP AUC of scores given as a CrypTen ``MPCTensor``, converted
  to the rank step's keys and digits on shares.
* :mod:`.owners` — :func:`evaluate_mpctensor_for_owners` and :func:`run_label_owner`:
  the same DP AUC when the labels are held by input parties (advertisers outside
  CrypTen's world, linked to every computing party, :func:`owner_links`).

They run inside a computing party, after :func:`secure_auc.mpc.comm.runtime.init_party`
(the label owners of :mod:`.owners` excepted: input parties, outside CrypTen's world).
"""

from .safe import SafeCrypten, install
from .bridge import evaluate_mpctensor, rank_mpctensor, score_keys
from .owners import evaluate_mpctensor_for_owners, owner_links, run_label_owner

__all__ = ["install", "SafeCrypten", "rank_mpctensor", "evaluate_mpctensor", "score_keys",
           "evaluate_mpctensor_for_owners", "owner_links", "run_label_owner"]
