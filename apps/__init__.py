"""Job classes written against the agent API: micro-promotion, product-bundling,
sale-prediction, spam-campaign and wordcount, plus the workload generator they are tested on.
"""
