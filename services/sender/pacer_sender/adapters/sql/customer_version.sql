-- The version of Pacer's copy of a customer.
SELECT version AS held FROM customers WHERE customer_id = %(id)s
