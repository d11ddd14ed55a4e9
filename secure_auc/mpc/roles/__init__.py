"""Each role of the MPC protocol written once; the launchers, the services and torchrun
only build the inputs a role runs on.

* ``world``  — CrypTen's start-up for one party (:class:`~.world.WorldPlan`,
  :func:`~.world.take_part`): the rendezvous, the links, then the dealer's service
  or the party's job, and the way out.
* ``computing`` — a computing party of the helpers layout across evaluations
  (:class:`~.computing.ComputingRole`), and a local session's computing party.
* ``host`` — a client host across evaluations (:class:`~.host.HostRole`), and a local
  session's client host.

The evaluation's steps are :mod:`..input_parties` (helpers layout) and :mod:`..party`
(clients layout); their last steps, shared by every layout, :mod:`..finish`.
"""
