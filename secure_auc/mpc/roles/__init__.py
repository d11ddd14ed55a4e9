"""Each role of the MPC protocol written once; the launchers, the services and torchrun
only build the inputs a role runs on.

* ``world``  — CrypTen's start-up for one party (:class:`~.world.WorldPlan`,
  :func:`~.world.take_part`): the rendezvous, the links, then the dealer's service
  or the party's job, and the way out.
* ``computing`` — a computing party of the helpers layout across evaluations
  (:class:`~.computing.ComputingRole`), a local session's computing party, and a deployed
  helper's service (:func:`~.computing.helper_service`).
* ``host`` — a client host across evaluations (:class:`~.host.HostRole`), a local
  session's client host, and a deployed client's service (:func:`~.host.client_service`).
* ``server`` — the deployed server's service (:class:`~.server.ServerService`): the
  platform's requests, the clients' answers, the evaluations.
* ``deployed`` — how each deployed party starts from its plan, or says why it cannot.
* ``control`` — what the deployed services share (:class:`~.control.ServicePlan`) and
  the control messages between them: epochs, refusal codes, escaped logs.

The evaluation's steps are :mod:`..input_parties` and :mod:`..input_hosts` (helpers layout) and :mod:`..party`
(clients layout); their last steps, shared by every layout, :mod:`..finish`.
"""
