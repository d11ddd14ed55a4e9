"""How MPC parties talk: the CrypTen shim behind named functions (:mod:`.backend`),
point-to-point messages (:mod:`.p2p`), bringing a party up and down (:mod:`.runtime`)."""
