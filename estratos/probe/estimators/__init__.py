"""The probes themselves: estimators and how they train.

What is here: the estimators' base class and registry (:mod:`.registry`), the built-in
estimators with every hyper-parameter in their constructors (:mod:`.classifiers`: SentEval's
classifier, the L-BFGS logistic regression, the SICK-R regressor), a task's overrides
applied to a fresh estimator (:mod:`.settings`), feature standardization from the data a
model is fitted on (:mod:`.scaling`), and the batched tensor program every SGD-trained
estimator runs (:mod:`.training`, :mod:`.adam`, :mod:`.runtime`). Nothing here knows about
caches, tasks' files or the grid: give an estimator feature groups and labels, it fits.
"""
