"""The FedAUC paper's published numbers (Criteo, epoch 1), for side-by-side comparison."""

INF = float("inf")

# Table "Mean and standard deviation of AUC computed by FedAUC_RR" (small set, epoch 1)
RR_SMALL = {  # eps: (mean, std)
    0.1: (0.745667, 2.41e-2), 0.25: (0.749169, 8.69e-3), 0.5: (0.749206, 5.39e-3), 1: (0.749495, 2.11e-3),
    2: (0.749453, 9.43e-4), 3: (0.749295, 5.46e-4), 4: (0.749207, 3.75e-4), 5: (0.749399, 2.05e-4),
    10: (0.749383, 1.77e-5), INF: (0.749383, 0.0),
}
RR_SMALL_SKLEARN = 0.749383

# Table "Noisy AUC computed by Randomized Response mechanism without debiasing" (epoch 1)
RR_NOISY = {0.1: 0.509429, 0.5: 0.546986, 1: 0.592421, 2: 0.667666, 4: 0.735230, 10: 0.749343}

# Table "Mean and standard deviation ... on large Criteo evaluation set" (epoch 1)
RR_LARGE = {
    0.1: (0.751439, 7.52e-3), 0.25: (0.750405, 2.90e-3), 0.5: (0.750589, 1.32e-3), 1: (0.750345, 5.51e-4),
    2: (0.750482, 3.03e-4), 3: (0.750480, 1.53e-4), 4: (0.750509, 9.45e-5), 5: (0.750500, 5.87e-5),
    10: (0.750509, 5.37e-6), INF: (0.750509, 0.0),
}

# Table "Standard deviation of AUC estimated by different methods" (alpha = 0.5)
METHOD_CLIENTS = [10, 458, 1000, 4584, 45840, 100000, 458407]
_ = None
METHODS_STD = {
    1.0: {
        ("rr", None): [2.17e-3] * 7,
        ("global", None): [1.22e-4, 8.48e-4, 1.24e-3, 2.39e-3, 8.08e-3, 1.24e-2, 2.77e-2],
        ("local", "iid"): [1.13e-4, 9.64e-4, 1.26e-3, 2.26e-3, 7.39e-3, 1.10e-2, 1.99e-2],
        ("local", "noniid"): [8.98e-5, 5.29e-4, 8.49e-4, 1.86e-3, 5.45e-3, 8.33e-3, 1.81e-2],
        ("adaptive", "iid"): [5.15e-5, 3.92e-4, _, 1.22e-3, 3.80e-3, _, _],
        ("adaptive", "noniid"): [2.93e-5, 1.22e-4, _, 3.92e-4, 1.03e-3, _, _],
    },
    2.0: {
        ("rr", None): [1.02e-3] * 7,
        ("global", None): [5.85e-5, 4.15e-4, 5.62e-4, 1.28e-3, 3.95e-3, 5.21e-3, 1.32e-2],
        ("local", "iid"): [5.74e-5, 4.72e-4, 5.78e-4, 1.21e-3, 4.09e-3, 5.24e-3, 8.86e-3],
        ("local", "noniid"): [4.59e-5, 2.91e-4, 4.93e-4, 9.45e-4, 3.09e-3, 4.38e-3, 9.96e-3],
        ("adaptive", "iid"): [2.60e-5, 1.84e-4, _, 6.48e-4, 1.66e-3, _, _],
        ("adaptive", "noniid"): [1.59e-5, 6.01e-5, _, 1.52e-4, 5.54e-4, _, _],
    },
    4.0: {
        ("rr", None): [3.49e-4] * 7,
        ("global", None): [2.92e-5, 2.09e-4, 3.26e-4, 6.58e-4, 1.88e-3, 3.22e-3, 7.02e-3],
        ("local", "iid"): [3.11e-5, 1.94e-4, 3.00e-4, 5.80e-4, 1.86e-3, 2.40e-3, 4.38e-3],
        ("local", "noniid"): [2.49e-5, 1.48e-4, 2.05e-4, 4.44e-4, 1.53e-3, 2.26e-3, 4.39e-3],
        ("adaptive", "iid"): [1.36e-5, 8.20e-5, _, 2.87e-4, 9.08e-4, _, _],
        ("adaptive", "noniid"): [7.80e-6, 2.81e-5, _, 8.72e-5, 2.77e-4, _, _],
    },
    8.0: {
        ("rr", None): [4.41e-5] * 7,
        ("global", None): [1.54e-5, 9.82e-5, 1.53e-4, 3.31e-4, 1.05e-3, 1.58e-3, 2.99e-3],
        ("local", "iid"): [1.51e-5, 1.06e-4, 1.40e-4, 3.27e-4, 8.52e-4, 1.35e-3, 2.29e-3],
        ("local", "noniid"): [1.06e-5, 6.99e-5, 1.14e-4, 2.19e-4, 7.50e-4, 1.16e-3, 2.22e-3],
        ("adaptive", "iid"): [7.01e-6, 4.55e-5, _, 1.37e-4, 4.61e-4, _, _],
        ("adaptive", "noniid"): [3.89e-6, 1.36e-5, _, 4.34e-5, 1.38e-4, _, _],
    },
}
ROW_NAMES = {
    ("rr", None): "RR",
    ("global", None): "GlobalLaplace",
    ("local", "iid"): "LocalLaplace (IID)",
    ("local", "noniid"): "LocalLaplace (Non-IID)",
    ("adaptive", "iid"): "adaptive (IID)",
    ("adaptive", "noniid"): "adaptive (Non-IID)",
}

# Table "Standard deviation of estimated AUC with accurate P and N" (appendix, tab:std_auc_w_accurate_P_and_N):
# only localSum is noisy, with the whole eps (its closed forms: sqrt(2K)(M-1)/(P N eps) for GlobalLaplace,
# sqrt(K(K-1)(2K-1)/3)/(P N eps) for LocalLaplace with one sample per client).  Columns: 45,840, 458.4,
# 4.6 and 1 samples per client on average, i.e. K = 10, 1000, 100,000 and 458,407.
ACCURATE_PN_CLIENTS = [10, 1000, 100000, 458407]
ACCURATE_PN_STD = {
    1.0: {
        ("global", None): [4.84e-5, 5.26e-4, 4.45e-3, 1.10e-2],
        ("local", "iid"): [4.81e-5, 4.66e-4, 4.25e-3, 6.44e-3],
        ("local", "noniid"): [3.40e-5, 2.98e-4, 2.76e-3, 6.08e-3],
    },
    2.0: {
        ("global", None): [2.61e-5, 2.58e-4, 2.37e-3, 5.65e-3],
        ("local", "iid"): [2.61e-5, 2.48e-4, 2.10e-3, 2.87e-3],
        ("local", "noniid"): [1.48e-5, 1.51e-4, 1.38e-3, 3.20e-3],
    },
    4.0: {
        ("global", None): [1.30e-5, 1.21e-4, 1.21e-3, 2.68e-3],
        ("local", "iid"): [1.23e-5, 1.20e-4, 1.14e-3, 1.56e-3],
        ("local", "noniid"): [6.63e-6, 7.22e-5, 6.20e-4, 1.69e-3],
    },
    8.0: {
        ("global", None): [6.29e-6, 5.94e-5, 6.12e-4, 1.34e-3],
        ("local", "iid"): [5.79e-6, 6.32e-5, 5.07e-4, 8.09e-4],
        ("local", "noniid"): [3.98e-6, 3.70e-5, 3.44e-4, 8.53e-4],
    },
}
ACCURATE_PN_ROWS = {
    ("global", None): "GlobalLaplace",
    ("local", "iid"): "LocalLaplace (IID)",
    ("local", "noniid"): "LocalLaplace (Non-IID)",
}
