# The pipeline's image for Kubeflow Pipelines and Vertex AI, and (through the
# --sdk_container_image that `nmt kubeflow compile` adds for Dataflow) for Beam workers:
# TFX 1.16's image plus this package, installed into that image's own Python 3.10.
#
# Build and push from the repository root, then compile with the same tag:
#   docker build -t REGISTRY/nmt-fra-eng:TAG .
#   docker push REGISTRY/nmt-fra-eng:TAG
#   nmt kubeflow compile --image REGISTRY/nmt-fra-eng:TAG ...
ARG TFX_IMAGE=gcr.io/tfx-oss-public/tfx:1.16.0

# 1. The wheel (built once; tests/test_kubeflow_image.py checks it carries schemas/schema.pbtxt).
FROM ${TFX_IMAGE} AS wheel
COPY . /src
RUN python -m pip wheel --no-deps --no-build-isolation --wheel-dir /wheels /src

# 2. The image: `python` is the interpreter the compiled spec's commands call
#    (python -m tfx.orchestration.kubeflow.v2...). The constraints are resolved for Python 3.10
#    against TFX's own image pins, so kfp, protobuf, google-cloud-aiplatform and TensorFlow stay
#    the versions the image was tested with; the image's CUDA TensorFlow is kept as it is.
FROM ${TFX_IMAGE}
# The TensorFlow settings `nmt` starts with locally (pipeline/tensorflow_env.py says why):
# oneDNN CPU kernels, also on CPUs where TensorFlow would not turn them on by itself.
ENV TF_ENABLE_ONEDNN_OPTS=1
COPY docker/constraints-py310.txt docker/check_image.py /opt/nmt/
COPY --from=wheel /wheels /opt/nmt/wheels
RUN python -m pip install --no-cache-dir -c /opt/nmt/constraints-py310.txt \
        /opt/nmt/wheels/nmt_fra_eng-*.whl \
    && python -m pip check
# The compiled pipeline names the schema by this path (kubeflow_runner.IMAGE_SCHEMA_FILE);
# it is the packaged copy, so the two cannot differ.
RUN mkdir -p /pipeline \
    && ln -s "$(python -c 'import schemas; print(schemas.SCHEMA_FILE)')" /pipeline/schema.pbtxt
# Every executor and module the compiled spec names, and tensorflow_text, import here.
RUN python /opt/nmt/check_image.py
