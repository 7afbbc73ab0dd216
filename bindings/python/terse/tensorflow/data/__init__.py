"""Horovod's horovod.tensorflow.data: tf.data service for terse jobs.

terse.tensorflow.data.compute_service has TfDataServiceConfig,
tf_data_service, send_to_data_service (also Dataset.send_to_data_service)
and compute_worker_fn; `python -m terse.tensorflow.data.compute_worker
CONFIG` is the compute job's program. docs/tensorflow.md ("tf.data
service") shows a whole job.
"""

from terse.tensorflow.data.compute_service import (TfDataServiceConfig,
                                                   compute_worker_fn,
                                                   send_to_data_service,
                                                   tf_data_service)
from terse.tensorflow.data.rendezvous import ComputeClient, ComputeService

__all__ = ["TfDataServiceConfig", "compute_worker_fn", "send_to_data_service",
           "tf_data_service", "ComputeClient", "ComputeService"]
